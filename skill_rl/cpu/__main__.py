"""`python -m skill_rl.cpu --checkpoint <run dir>[/checkpoints/NNNN]`: serve a checkpoint for --eval.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from skill_rl import flags
from skill_rl.errors import Exit
from skill_rl.cpu.weights import TINY_MODEL, quiet_threads
from skill_rl.cpu.backend import serve_checkpoint


def main(argv=None) -> int:
    p = flags.Parser(prog="python -m skill_rl.cpu", description="Serve a --backend cpu checkpoint, and its base model as `base`, "
                                            "on an OpenAI-compatible endpoint for --eval.")
    p.add_argument("--checkpoint", type=Path, help="a checkpoint folder, or a run folder (its latest checkpoint)")
    p.add_argument("--base-model", default=TINY_MODEL, help=f"what the run trained (default {TINY_MODEL})")
    p.add_argument("--name", default="trained", help="the served name of the checkpoint (default trained)")
    p.add_argument("--port", type=flags.count(1, maximum=65535), default=8000, help="port on 127.0.0.1 (default 8000)")
    args = p.parse_args(argv)
    quiet_threads()
    try:
        server = serve_checkpoint(args.checkpoint, args.base_model, args.name, args.port)
    except Exit as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except OSError as e:  # the port is taken
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {e}", file=sys.stderr)
        return 2
    models = " ".join(f"--model {n}@{server.url}" for n in server.names)
    print(f"serving {', '.join(server.names)} at {server.url}; compare them with\n"
          f"  python train_skill.py --skill SKILL --eval {models} --judge none\nCtrl-C stops", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
