"""The KL anchor: RL's steps kept near a reference checkpoint (by default the warm start's).

ART 0.5.23's `backend.train` takes `kl_penalty_coef` and `kl_penalty_reference_step` (LocalBackend,
ServerlessBackend; art/local/backend.py): each sampled token's advantage is shifted by
coef x (the batch's mean KL - the token's KL), the token's KL being the policy's logprob of it minus the
reference's, so that tokens the policy now likes far more than the reference did pay less. The CPU backend
does the same in its loss (skill_rl/cpu/backend.py). ART's Tinker backend accepts the arguments and drops
them (art/tinker/service.py gives its loss no reference logprobs), so `--kl-coef` is refused there.

The reference is a checkpoint step: `--kl-ref-step`, else the warm start's last step, else none (the base
model, LoRA off). A run records its anchor in ART's state.json the first time it trains with one: a resumed
run keeps that reference (another `--kl-ref-step` is refused), and the checkpoint is kept when a run deletes
the others (train_skill.py, keep_best_and_latest).
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

from skill_rl.errors import Exit
from skill_rl.settings.defaults import DEFAULT_COEF

# under this key in ART's state.json: {"coef": c, "reference": step or None}
STATE_KEY = "skill_rl_kl_anchor"
NO_KL = {
    "tinker": "ART 0.5.23's Tinker backend takes kl_penalty_coef and drops it (art/tinker/service.py passes "
    "its loss no reference logprobs): --kl-coef would change nothing there; leave it out"
}


@dataclass(frozen=True)
class Anchor:
    # 0: no penalty (with a reference, the CPU backend still measures the KL to it)
    coef: float = 0.0
    # checkpoint step; None: the base model
    reference: int | None = None
    # a reference the run recorded but does not use now (--kl-coef 0): kept all the same
    held: int | None = None

    @property
    def active(self) -> bool:
        return self.coef > 0 or self.reference is not None

    def kwargs(self) -> dict:
        """What `backend.train` is given, by ART's names; nothing when there is no anchor."""
        return {"kl_penalty_coef": self.coef, "kl_penalty_reference_step": self.reference} if self.active else {}

    def keep(self) -> set[int]:
        """The checkpoint steps the run needs beside the best and the latest."""
        return {step for step in (self.reference if self.active else None, self.held) if step}

    def describe(self) -> str:
        ref = f"checkpoint {self.reference}" if self.reference else "the base model"
        return (
            f"KL anchor: coefficient {self.coef:g} to {ref}"
            if self.coef > 0
            else f"KL to {ref} measured, no penalty (--kl-coef 0)"
        )


def default_coef(kind: str, warm_start: bool) -> float:
    """--kl-coef left out: DEFAULT_COEF after a warm start on a backend that applies it, else 0."""
    return DEFAULT_COEF if warm_start and kind not in NO_KL else 0.0


def check_flags(s) -> None:
    """Exit 2 for an anchor the backend would ignore."""
    if s.backend in NO_KL and (s.kl_coef or s.kl_ref_step is not None):
        raise Exit(2, f"--kl-coef on --backend {s.backend}: {NO_KL[s.backend]}")


def warm_step(state: dict) -> int | None:
    """The last step of the run's finished warm start (training/warmstart.py's record), else None."""
    from skill_rl.training.warmstart import STATE_KEY as WARM

    warm = state.get(WARM)
    return warm["step"] if isinstance(warm, dict) and warm.get("epochs_done", 0) >= warm.get("epochs", 1) else None


def resolve(s, model, backend, step: int) -> Anchor:
    """The anchor of the RL steps to come: the run's recorded reference, else --kl-ref-step, else the warm
    start's last step, else the base model; recorded in the run's state when first used."""
    state = model.read_state() or {}
    recorded, warm = state.get(STATE_KEY), warm_step(state)
    given = s.kl_ref_step
    if isinstance(recorded, dict) and "reference" in recorded:
        if given is not None and given != recorded["reference"]:
            raise Exit(
                2,
                f"--kl-ref-step {given}: run {s.run_name} is anchored to step {recorded['reference']} (its "
                "state.json says so); resume it with that reference, or start another --run-name",
            )
        reference = recorded["reference"]
    else:
        reference = given if given is not None else warm
    # step 0 is the base model
    reference = reference or None
    anchor = Anchor(s.kl_coef, reference) if s.kl_coef > 0 or given is not None else Anchor()
    # a recorded reference stays on disk: the run may be resumed with its anchor again
    if not anchor.active:
        return Anchor(held=reference if isinstance(recorded, dict) else None)
    if reference and reference > step:
        raise Exit(
            2,
            f"--kl-ref-step {reference}: run {s.run_name} has {step} step(s) so far; the reference must be one of them",
        )
    folder = Path(model._get_output_dir()) / "checkpoints" / f"{reference or 0:04d}"
    if reference and s.backend in ("local", "cpu") and not folder.is_dir():
        raise Exit(
            2, f"the KL anchor's reference checkpoint {folder} is missing; pass another --kl-ref-step, or --kl-coef 0"
        )
    if not accepts_kl(backend):
        raise Exit(2, f"--backend {s.backend}: its train() takes no kl_penalty_coef; leave --kl-coef out")
    if isinstance(recorded, dict) and recorded.get("coef") not in (None, anchor.coef):
        print(
            f"note: --kl-coef {anchor.coef:g}, not {recorded['coef']:g} as before: the steps to come use the new one",
            file=sys.stderr,
        )
    model.merge_state({STATE_KEY: {"coef": anchor.coef, "reference": reference}})
    return anchor


def accepts_kl(backend) -> bool:
    params = inspect.signature(backend.train).parameters
    return "kl_penalty_coef" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
