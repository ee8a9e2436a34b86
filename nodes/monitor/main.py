"""Console script `tc-monitor`: `--help` from spec.py (dora-node.yml says the same), the node itself in node.py."""

from __future__ import annotations

import sys

from ..common.loop import console_main
from .spec import SPEC


def main() -> int:
    return console_main(SPEC, __package__)


if __name__ == "__main__":
    sys.exit(main())
