"""Console script `tc-rerun-sink`: see ../README.md and dora-node.yml.

`--help` (and a stray argument) is answered from the node's SPEC alone, before torch, dora or
tensor_codec is imported: instantly, and without a dora daemon. Everything else is node.py.
"""

from __future__ import annotations

import sys

from ..common.startup import answer_command_line
from .spec import SPEC


def main() -> int:
    answered = answer_command_line(SPEC)
    if answered is not None:
        return answered
    from .node import main as run  # the node: torch, dora, tensor_codec

    return run()


if __name__ == "__main__":
    sys.exit(main())
