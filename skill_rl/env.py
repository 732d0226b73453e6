"""The environment a command runs in: `.env` files, and whether the judge's provider has what it needs.

`.env` is read from the working directory (or the nearest parent that has one), then from beside
the script; a variable already set is never overridden, so the shell wins, then the working
directory's file. The judge check runs before anything is spent: a missing key is an exit 2 at
start-up, not a training run scored by checks only.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


def load_env(script_dir: Path) -> list[Path]:
    """Load `.env` from the working directory upwards, then beside the script; return the files read."""
    from dotenv import find_dotenv, load_dotenv

    found = [Path(p) for p in (find_dotenv(usecwd=True), script_dir / ".env") if p and Path(p).is_file()]
    files = list(dict.fromkeys(p.resolve() for p in found))
    for f in files:
        load_dotenv(f, override=False)
    return files


def where_keys_go() -> str:
    """How to name the places a key can come from, for error messages."""
    return f"the environment or {Path.cwd() / '.env'}"


def judge_env_problem(model: str, base_url: str | None, api_key: str | None) -> tuple[str, str | None]:
    """(model id with its provider prefix, a one-line problem or None) for a LiteLLM judge model.

    An OpenAI-compatible judge at `base_url` needs nothing more. Otherwise LiteLLM names the provider and
    the variables it needs (`litellm.validate_environment`); a key given to skill-rl (JUDGE_API_KEY or
    --judge-api-key) stands in for the provider's own key variable."""
    if base_url and model.startswith("openai/"):
        return model, None
    import litellm

    litellm.suppress_debug_info = True  # no banner on stdout for an unknown provider
    try:
        name, provider, _, _ = litellm.get_llm_provider(model, api_base=base_url or None)
    except litellm.BadRequestError:
        return model, (f"judge {model}: LiteLLM does not know this provider; use a LiteLLM model id "
                       "such as openai/gpt-4.1-mini, anthropic/..., gemini/..., ollama/...")
    model = model if model.startswith(f"{provider}/") else f"{provider}/{name}"
    with _blank_vars_unset():  # `KEY=` (a copied .env.example) is not a key, though LiteLLM would count it
        missing = litellm.validate_environment(model, api_key=api_key or None, api_base=base_url or None).get("missing_keys") or []
    if not missing:
        return model, None
    return model, (f"judge {model} needs {', '.join(missing)} (as LiteLLM reports) in {where_keys_go()}; or pass "
                   "--judge-api-key / JUDGE_API_KEY, or point --judge-base-url at an OpenAI-compatible judge, "
                   "or pass --judge none to score offline")


@contextmanager
def _blank_vars_unset():
    """Unset variables whose value is blank for the duration (start-up only: nothing else runs yet)."""
    blank = {k: v for k, v in os.environ.items() if not v.strip()}
    for k in blank:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(blank)
