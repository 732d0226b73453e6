"""What the judge costs: tokens from each judge response, dollars from LiteLLM's local price map.

ART's RULER hands every judge response to the active `art.metrics.MetricsBuilder` so that it can be
priced; `recording()` activates one that also counts the response's tokens into a `JudgeUsage`. Every
response is counted, including those of attempts that were then retried (they were paid for).
The price is LiteLLM's for the configured judge model id; a model its map does not know (a judge
you serve yourself, for one) leaves the cost unknown rather than guessed.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields


@dataclass
class JudgeUsage:
    # judge responses received
    responses: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # USD, over the responses the price map knows
    cost: float = 0.0
    # responses whose model the price map does not know
    unpriced: int = 0

    def add(self, other: JudgeUsage) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def since(self, earlier: JudgeUsage) -> JudgeUsage:
        """What was used between `earlier` (a copy taken then) and now."""
        return JudgeUsage(**{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)})

    def copy(self) -> JudgeUsage:
        return JudgeUsage(**asdict(self))

    @property
    def priced(self) -> bool:
        return self.responses > 0 and self.unpriced == 0

    def record(self, model: str, usage) -> float | None:
        """Count one response's `usage` (an OpenAI-style usage object, or None) and return its cost."""
        self.responses += 1
        self.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
        self.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
        cost = price(model, usage) if usage is not None else None
        if cost is None:
            self.unpriced += 1
        else:
            self.cost += cost
        return cost

    def metrics(self, cost_context: str) -> dict[str, float]:
        """Step metrics; the cost under ART's `costs/<context>/...` keys, so ART keeps its running total."""
        out = {
            "judge_responses": float(self.responses),
            "judge_prompt_tokens": float(self.prompt_tokens),
            "judge_completion_tokens": float(self.completion_tokens),
        }
        if self.responses and not self.unpriced:
            out[f"costs/{cost_context}/judge"] = self.cost
        return out

    def brief(self) -> str:
        """'12,345 tok $0.0042' (or 'price unknown'), for the step line."""
        tokens = f"{self.prompt_tokens + self.completion_tokens:,} tok"
        if not self.responses:
            return tokens
        return f"{tokens} ${self.cost:.4f}" if self.priced else f"{tokens}, price unknown"

    def describe(self, model: str) -> str:
        """One sentence for summaries and reports."""
        head = (
            f"judge {model}: {self.responses} response(s), {self.prompt_tokens:,} prompt + "
            f"{self.completion_tokens:,} completion tokens"
        )
        if not self.responses:
            return head
        if self.priced:
            return f"{head}, ${self.cost:.4f} at LiteLLM's price map"
        return f"{head}; cost unknown: LiteLLM's price map does not know {model}"

    def as_dict(self) -> dict:
        return {**asdict(self), "cost": round(self.cost, 8) if self.priced else None}


def price(model: str, usage) -> float | None:
    """USD for one response from LiteLLM's local price map (cached prompt tokens included), or None."""
    import litellm

    try:
        prompt, completion = litellm.cost_per_token(model=model, usage_object=usage)
    # litellm raises a bare Exception for a model its map does not know
    except Exception:
        return None
    return prompt + completion


@functools.cache
def _recorder_class():
    from art.metrics import MetricsBuilder

    class UsageRecorder(MetricsBuilder):
        """The MetricsBuilder RULER reports its judge responses to: counts them into a JudgeUsage."""

        def __init__(self, model: str, usage: JudgeUsage):
            super().__init__(cost_context="judge")
            self.model, self.usage = model, usage

        def add_response_cost(self, source, response, *, provider, model_name, **_) -> float | None:
            return self.usage.record(self.model, getattr(response, "usage", None))

    return UsageRecorder


def recording(model: str, usage: JudgeUsage):
    """A context manager: the RULER calls made inside it count their responses into `usage`."""
    return _recorder_class()(model, usage).activate_context()
