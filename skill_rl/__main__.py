"""`python -m skill_rl ...`: the same command as `python train_skill.py ...` and the `skill-rl` script."""

import sys

if __name__ == "__main__":
    from train_skill import main

    # for --help
    sys.argv[0] = "python -m skill_rl"
    sys.exit(main())
