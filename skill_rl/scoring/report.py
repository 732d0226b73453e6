"""The tables, charts and comparison lines of scored models, shared by `--eval`, training's last validation and the
export's model card: one row per model (summarize), printed (print_table), as markdown (markdown_table), as a bar
chart (bar_chart), and what SKILL.md and a shorter prompt change (uplift, saving)."""

from __future__ import annotations

import io
import math
import random
from pathlib import Path

from skill_rl.console import chart_text, clean
from skill_rl.files import atomic_write
from skill_rl.scoring.reward import Scorer
from skill_rl.skills import DIMENSIONS, Skill


def bootstrap(values: list[float], reps: int = 1000, seed: int = 0) -> tuple[float, float] | None:
    if len(values) < 2:
        return None
    rng, n = random.Random(seed), len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(reps))
    return means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def wilson(passed: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The 95 % Wilson score interval of the share passed/n (None for n = 0): unlike the normal approximation it
    stays inside 0-1 and does not shrink to a point at 0 or n passed."""
    if n <= 0:
        return None
    p, z2 = passed / n, z * z
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def gates_passed(metrics: list[dict], scorer: Scorer) -> tuple[list[str], int]:
    """The scorer's gate checks, and how many of the outputs (Score.metrics each) failed none of them; a gate that did
    not apply to an output (no metric) is not failed. For a tool skill: the episodes that did what the skill is for
    (git-commit-agent: exactly one commit, and a Conventional Commits message)."""
    gates = [f.__name__ for f in scorer.fns if getattr(f, "gate", False)]
    return gates, sum(all(m.get(f"check/{g}", 1.0) >= 1.0 for g in gates) for m in metrics)


def summarize(label: str, metrics: list[dict], scorer: Scorer, failures: int = 0) -> dict:
    """One table row from per-output metrics (Score.metrics: a missing key means 'not scored')."""

    def mean(key):
        vals = [m[key] for m in metrics if key in m]
        return sum(vals) / len(vals) if vals else None

    rewards = [m["reward"] for m in metrics]
    key_checks = [f.__name__ for f in scorer.fns if f.key]
    return {
        "model": label,
        "n": len(metrics),
        "failures": failures,
        **{d: mean(d) for d in DIMENSIONS},
        "overall": mean("reward"),
        "ci95": bootstrap(rewards),
        "checks": {k: mean(f"check/{k}") for k in key_checks},
    }


def _cell(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def _rows(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    checks = list(rows[0]["checks"]) if rows else []
    # rows of --eval; validation's have none
    tokens = any(r.get("prompt_tokens") is not None for r in rows)
    # rows of --eval on a skill with tools
    episodes = any("turns" in r for r in rows)
    head = [
        "model",
        "n",
        "format",
        "procedure",
        "correctness",
        "overall",
        "95% CI",
        *checks,
        *(["prompt tokens"] if tokens else []),
        *(["turns", "tool errors"] if episodes else []),
        "failures",
    ]
    body = []
    for r in rows:
        ci = f"{r['ci95'][0]:.3f}–{r['ci95'][1]:.3f}" if r["ci95"] else "—"
        body.append(
            [
                r["model"],
                str(r["n"]),
                *(_cell(r[d]) for d in (*DIMENSIONS, "overall")),
                ci,
                *(_cell(r["checks"][c]) for c in checks),
                *([_tokens(r)] if tokens else []),
                *([f"{r['turns']:.1f}" if "turns" in r else "—", str(r.get("tool_errors", "—"))] if episodes else []),
                str(r["failures"]),
            ]
        )
    return head, body


def _tokens(row: dict) -> str:
    """Prompt tokens per request; `~` when some were estimated (the server reported no usage)."""
    x = row.get("prompt_tokens")
    return "—" if x is None else f"{'~' if row.get('prompt_estimated') else ''}{x:.0f}"


def print_table(skill: Skill, rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from skill_rl.console import literal

    head, body = _rows(rows)
    console = Console()
    # never shorten a figure to fit a narrow pipe
    console.width = max(console.width, 40 + 11 * len(head))
    table = Table(title=literal(title))
    for i, h in enumerate(head):
        table.add_column(literal(h), justify="left" if i == 0 else "right")
    for line in body:
        table.add_row(*map(literal, line))
    console.print(table)


def _md_cell(text: str) -> str:
    """A table cell: `|` escaped and line breaks flattened, so that a label cannot add or break columns."""
    return " ".join(clean(text).split()).replace("|", "\\|")


def markdown_table(rows: list[dict]) -> str:
    head, body = _rows(rows)
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|",
    ]
    return "\n".join(lines + ["| " + " | ".join(map(_md_cell, line)) + " |" for line in body])


def bar_chart(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = ["format", "procedure", "correctness", "overall"]
    width = 0.8 / max(1, len(rows))
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, r in enumerate(rows):
        ax.bar(
            [c + i * width for c in range(len(cols))],
            [r[c] or 0.0 for c in cols],
            width,
            label=chart_text(r["model"]),
            hatch="//" if r.get("baseline") else None,
        )
    ax.set_xticks([c + width * (len(rows) - 1) / 2 for c in range(len(cols))], cols)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean score")
    ax.set_title(chart_text(title))
    ax.legend(fontsize="small")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    # whole or not at all, never through a link planted at the name
    atomic_write(path, png.getvalue())


def uplift(rows: list[dict]) -> dict[str, dict]:
    """For each model with a --baseline row: its scores with the SKILL.md minus without, per column."""
    by_label = {r["model"]: r for r in rows}
    out = {}
    for r in rows:
        base = by_label.get(f"{r['model']} (no skill)")
        if base and not r["baseline"]:
            out[r["model"]] = {
                c: None if r[c] is None or base[c] is None else round(r[c] - base[c], 6)
                for c in (*DIMENSIONS, "overall")
            }
    return out


def saving(rows: list[dict]) -> dict[str, dict]:
    """For each model with a --baseline row: its prompt tokens per request with SKILL.md, without, and the saving."""
    by_label = {r["model"]: r for r in rows}
    out = {}
    for r in rows:
        base = by_label.get(f"{r['model']} (no skill)")
        if base and not r["baseline"] and r.get("prompt_tokens") and base.get("prompt_tokens") is not None:
            saved = r["prompt_tokens"] - base["prompt_tokens"]
            out[r["model"]] = {
                "with": r["prompt_tokens"],
                "without": base["prompt_tokens"],
                "saved": saved,
                "fraction": round(saved / r["prompt_tokens"], 6),
                "estimated": r["prompt_estimated"] or base["prompt_estimated"],
            }
    return out


def saving_lines(result: dict) -> list[str]:
    return [
        f"prompt tokens per request, {label}: {s['with']:.0f} with the SKILL.md, {s['without']:.0f} without: "
        f"{s['saved']:.0f} saved ({s['fraction']:.0%})"
        + (" (estimated: the server reported no usage)" if s["estimated"] else "")
        for label, s in result.get("saving", {}).items()
    ]


WITHOUT_WORDS = {"description": "the description only", "stub": "a one-line stub", "none": "no system prompt"}


def uplift_lines(result: dict) -> list[str]:
    versus = WITHOUT_WORDS[result.get("without") or "description"]
    return [
        f"skill uplift, {label}: overall {_signed(u['overall'])} ("
        + ", ".join(f"{d} {_signed(u[d])}" for d in DIMENSIONS)
        + f") with the SKILL.md vs {versus}"
        for label, u in result["uplift"].items()
    ]


def _signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.3f}"
