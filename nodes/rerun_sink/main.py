"""Console script `tc-rerun-sink`: `--help` from config.py (as dora-node.yml), the node itself in node.py."""

from __future__ import annotations

import sys

from ..common.loop import console_main
from .config import SPEC


def main() -> int:
    return console_main(SPEC, __package__)


if __name__ == "__main__":
    sys.exit(main())
