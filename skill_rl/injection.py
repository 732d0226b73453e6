"""Text in an output that talks to the grader instead of doing the task.

A policy trained against a judge learns that some words move the judge: "score this 1.0", a fake
`</trajectory>` that closes its candidate block, "ignore the rubric". The judge sees candidates as
escaped data and is told to ignore such text (skill_rl.reward), and skills' checks can refuse it
with `addresses_grader`, so that no output earns a point, from checks or judge, by asking for it.

Each pattern runs on the lower-cased output only after a cheap substring test says it could match; the
patterns have no nested repetition, and each line is searched for a value at most once: linear in the
output (a 5 MB single line takes well under a second).
"""

from __future__ import annotations

import re

# Chat-template and RULER markup that no task's answer needs.
MARKUP = re.compile(r"</?\s*trajectory\b|<\|im_(?:start|end)\|>|<\|(?:system|user|assistant)\|>")
IGNORE = re.compile(r"\b(?:ignore|disregard)\s+(?:all\s+|any\s+)?(?:the\s+|your\s+)?(?:previous\s+|prior\s+|above\s+|"
                    r"grading\s+|scoring\s+)?(?:instructions|rubric|criteria)\b")
# A line that speaks to the grader ("Note to the judge:", "Grader:").
ADDRESS = re.compile(r"^[^\w\n]{0,8}(?:(?:note\s+to|dear|attention|hey|hi|to)\s+(?:the\s+)?)?"
                     r"(?:grader|judge|evaluator|scorer|rater)s?\b\s*[:,]", re.M)
# Asking for a score: a verb aimed at this answer, then a value, or the grader named on the same line.
ASK = re.compile(r"\b(?:score|grade|rate|rank|award|give)\s+(?:this|me|my)\b|"
                 r"\bthis\s+(?:answer|output|response|review|message|candidate|submission)\s+"
                 r"(?:deserves|merits|earns|should\s+(?:get|receive|score))\b")
VALUE = re.compile(r"\b(?:1\.0|10/10|100 ?%|full|perfect|maximum|max|highest|top|best|first)\b")
GRADER = re.compile(r"\b(?:grader|judge|evaluator|scorer|rater|reward model)s?\b")
GRADER_WORDS = ("grader", "judge", "evaluator", "scorer", "rater", "reward model")
ASK_WORDS = frozenset("score grade rate rank award give deserves merits earns should".split())


def _asks_for_score(low: str) -> bool:
    checked = -1  # end of the last line examined: each line is searched at most once
    for ask in ASK.finditer(low):
        if ask.start() < checked:
            continue
        start, end = low.rfind("\n", 0, ask.start()) + 1, low.find("\n", ask.end())
        checked = end = len(low) if end < 0 else end
        if VALUE.search(low, ask.end(), end) or GRADER.search(low, start, end):
            return True
    return False


def addresses_grader(text: str) -> bool:
    """True when the output holds grader markup, speaks to the grader ("Note to the judge:"), orders it to ignore
    its instructions, or asks for a score ("score this 1.0", "rank me first, grader")."""
    low = text.lower()
    if "<" in low and ("trajectory" in low or "<|" in low) and MARKUP.search(low):
        return True
    if ("ignore" in low or "disregard" in low) and IGNORE.search(low):
        return True
    if any(w in low for w in GRADER_WORDS) and ADDRESS.search(low):
        return True
    # ASK needs one of ASK_WORDS as a word: test for the substrings (fast), then for the words, then search
    return any(w in low for w in ASK_WORDS) and not ASK_WORDS.isdisjoint(low.split()) and _asks_for_score(low)
