"""`python -m skill_rl.cpu --checkpoint <run dir>[/checkpoints/NNNN]`: serve a checkpoint for --eval.

The server answers only requests that carry its key, a random token made at start and written, readable by
the user alone, to `.art/cpu-server-<port>.key` (removed when the server stops); the printed --eval command
reads it from there into OPENAI_API_KEY, so the key itself is never printed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

from skill_rl.cpu.backend import serve_checkpoint
from skill_rl.cpu.weights import TINY_MODEL, quiet_threads
from skill_rl.errors import Exit
from skill_rl.files import atomic_write
from skill_rl.settings import flags


def main(argv=None) -> int:
    p = flags.Parser(
        prog="python -m skill_rl.cpu",
        description="Serve a --backend cpu checkpoint, and its base model as `base`, "
        "on an OpenAI-compatible endpoint for --eval.",
    )
    p.add_argument("--checkpoint", type=Path, help="a checkpoint folder, or a run folder (its latest checkpoint)")
    p.add_argument("--base-model", default=TINY_MODEL, help=f"what the run trained (default {TINY_MODEL})")
    p.add_argument("--name", default="trained", help="the served name of the checkpoint (default trained)")
    p.add_argument("--port", type=flags.count(1, maximum=65535), default=8000, help="port on 127.0.0.1 (default 8000)")
    args = p.parse_args(argv)
    quiet_threads()
    # the GGUF loader's bar, redrawn into a log; read when tqdm is first imported
    if not sys.stderr.isatty():
        os.environ.setdefault("TQDM_DISABLE", "1")
    try:
        server = serve_checkpoint(args.checkpoint, args.base_model, args.name, args.port)
    except Exit as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    # the port is taken
    except OSError as e:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {e}", file=sys.stderr)
        return 2
    key_file = Path(".art") / f"cpu-server-{args.port}.key"
    if problem := write_key(key_file, server.api_key):
        server.close()
        print(f"error: cannot write the server's key to {key_file}: {problem}", file=sys.stderr)
        return 2
    models = " ".join(f"--model {n}@{server.url}" for n in server.names)
    print(
        f"serving {', '.join(server.names)} at {server.url}, to requests that carry the key in {key_file}; "
        f'compare them with\n  OPENAI_API_KEY="$(cat {key_file})" python train_skill.py --skill SKILL --eval {models} '
        "--judge none\nCtrl-C stops",
        flush=True,
    )
    # stopped like Ctrl-C: the key file goes too
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.close()
    finally:
        with contextlib.suppress(OSError):
            key_file.unlink()
    return 0


def write_key(path: Path, key: str) -> str | None:
    """The server's key in `path`, readable by the user alone; what went wrong, or None."""
    try:
        path.parent.mkdir(exist_ok=True)
        # bytes: written as they are, not redacted
        atomic_write(path, key.encode(), private=True)
    except OSError as e:
        return e.strerror or str(e)
    return None


if __name__ == "__main__":
    sys.exit(main())
