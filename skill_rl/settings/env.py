"""The environment a command runs in: `.env` files, proxies, and whether the judge's provider has what it needs.

`.env` is read from the working directory (or the nearest parent that has one), then from beside
the script; a variable already set is never overridden, so the shell wins, then the working
directory's file. A `.env` may be anyone's (a repository's committed one, when mining `.`), so it
sets only what the project reads: keys, endpoints and model ids (`ENV_NAMES`); a process-level
variable (`LD_PRELOAD`, `PYTHONPATH`, `PATH`, `GIT_*`, proxies...) is ignored with one line saying so.
It must be UTF-8 (a BOM is fine): anything else is an exit 2 naming the file.

The process's own endpoints on this machine (the CPU backend's policy server, a local judge or model)
never go through an HTTP proxy: `loopback_without_proxy` adds them to NO_PROXY.

The judge check runs before anything is spent: a missing key is an exit 2 at start-up, not a training
run scored by checks only.
"""

from __future__ import annotations

import io
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

# What a .env may set: keys, endpoints and model ids (the project's own and LiteLLM providers'), never what
# changes how a process or a library loads and runs (LD_*, PYTHON*, PATH, GIT_*, proxies, certificates...).
ENV_NAMES = re.compile(
    r"[A-Z][A-Z0-9_]*_(API_KEY|KEY|TOKEN|API_BASE|BASE_URL|API_VERSION|MODEL|ACCESS_KEY_ID"
    r"|SECRET_ACCESS_KEY|SESSION_TOKEN|REGION_NAME|PROJECT|ENTITY|LOCATION)|SKILL_RL_CPU_THREADS"
)
PROCESS_LEVEL = re.compile(r"LD_|DYLD_|PYTHON|GIT_")
MAX_BYTES = 1_000_000
LOOPBACK = ("localhost", "127.0.0.1", "::1")


def _read(path: Path) -> dict[str, str | None]:
    from dotenv import dotenv_values

    from skill_rl.errors import Exit

    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise Exit(2, f"{path}: cannot read it: {e.strerror or e}") from None
    if len(raw) > MAX_BYTES:
        raise Exit(2, f"{path}: over {MAX_BYTES:,} bytes; a .env holds a few keys and endpoints")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        utf16 = raw[:2] in (b"\xff\xfe", b"\xfe\xff")
        raise Exit(
            2,
            f"{path}: not UTF-8 text ("
            + ("UTF-16, as PowerShell writes it" if utf16 else f"byte 0x{raw[e.start]:02x} at offset {e.start}")
            + "); save it as UTF-8",
        ) from None
    return dotenv_values(stream=io.StringIO(text))


def load_env(script_dir: Path) -> list[Path]:
    """Load `.env` from the working directory upwards, then beside the script; return the files read.
    Raises errors.Exit(2) for a file that is not UTF-8."""
    from dotenv import find_dotenv

    found = [Path(p) for p in (find_dotenv(usecwd=True), script_dir / ".env") if p and Path(p).is_file()]
    files = list(dict.fromkeys(p.resolve() for p in found))
    for f in files:
        ignored = []
        for name, value in _read(f).items():
            if not ENV_NAMES.fullmatch(name) or PROCESS_LEVEL.match(name):
                ignored.append(name)
            elif value is not None and name not in os.environ:
                os.environ[name] = value
        if ignored:
            shown = ", ".join(n[:40] for n in ignored[:6]) + (
                f" and {len(ignored) - 6} more" if len(ignored) > 6 else ""
            )
            print(
                f"note: {f}: ignored {shown}: a .env sets only keys, endpoints and model ids (names ending in "
                "_API_KEY, _TOKEN, _BASE_URL, _MODEL, ...); set others in the shell",
                file=sys.stderr,
            )
    return files


def loopback_without_proxy() -> None:
    """Behind a proxy (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY), add this machine's names to NO_PROXY, so that
    every HTTP client of the process (openai's, ART's, LiteLLM's) calls 127.0.0.1 directly."""
    if not any(k.lower() in ("http_proxy", "https_proxy", "all_proxy") and v for k, v in os.environ.items()):
        return
    hosts = [h.strip() for k in ("no_proxy", "NO_PROXY") for h in os.environ.get(k, "").split(",") if h.strip()]
    if "*" not in hosts:
        os.environ["no_proxy"] = os.environ["NO_PROXY"] = ",".join(dict.fromkeys([*hosts, *LOOPBACK]))


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

    # no banner on stdout for an unknown provider
    litellm.suppress_debug_info = True
    try:
        name, provider, _, _ = litellm.get_llm_provider(model, api_base=base_url or None)
    except litellm.BadRequestError:
        return model, (
            f"judge {model}: LiteLLM does not know this provider; use a LiteLLM model id "
            "such as openai/gpt-4.1-mini, anthropic/..., gemini/..., ollama/..."
        )
    model = model if model.startswith(f"{provider}/") else f"{provider}/{name}"
    # `KEY=` (a copied .env.example) is not a key, though LiteLLM would count it
    with _blank_vars_unset():
        missing = (
            litellm.validate_environment(model, api_key=api_key or None, api_base=base_url or None).get("missing_keys")
            or []
        )
    if not missing:
        return model, None
    return model, (
        f"judge {model} needs {', '.join(missing)} (as LiteLLM reports) in {where_keys_go()}; or pass "
        "--judge-api-key / JUDGE_API_KEY, or point --judge-base-url at an OpenAI-compatible judge, "
        "or pass --judge none to score offline"
    )


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


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether `url`'s server answers at all within `timeout` seconds (any HTTP status counts; proxies are
    honoured). A cheap probe before work that would need the network minutes later (an upload, a download)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    # the server answered, with an error status: it is there
    except urllib.error.HTTPError:
        return True
    # URLError, a timeout, a refused connection, a malformed URL
    except (OSError, ValueError):
        return False
