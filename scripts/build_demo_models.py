"""Build the demo models that ship inside specplay, offline (about an hour on two cores).

    python scripts/build_demo_models.py OUT_DIR [--stage all|tokenizer|target|base|prose|manifest]

Each stage is skipped when its output exists, so an interrupted build continues; the stages are
described in specplay/train/demo_models.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specplay.train.demo_models import STAGES, build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--stage", choices=["all", *STAGES], default="all")
    args = parser.parse_args(argv)
    build(args.out, args.stage)
    return 0


if __name__ == "__main__":
    sys.exit(main())
