"""An interpreter without the optional packages: with this folder first on PYTHONPATH, Python
imports this file at start-up (as `sitecustomize`) and every import of a blocked package raises
ModuleNotFoundError, as if it were not installed. tests/test_optional_packages.py runs pytest so;
by hand:

    PYTHONPATH=tests/support/without_optional .venv/bin/python -m pytest -rs tests/nodes

WITHOUT_OPTIONAL=torchcodec,rerun blocks only those (default: all of BLOCKED)."""

from __future__ import annotations

import os
import sys

BLOCKED = (
    "torchcodec",
    "nvidia.nvimgcodec",
    "rerun",
    "matplotlib",
    # the dora hub nodes of examples/hub-nodes.txt
    "dora_echo",
    "dora_camera_opencv",
    "dora_opencv_image_splitter",
)


class _Blocker:
    """A finder asked before all others: a blocked package and its submodules are not found."""

    def __init__(self, blocked):
        self.blocked = tuple(blocked)

    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in self.blocked):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by {__file__})", name=name)
        return None  # not ours: the next finder looks


_chosen = os.environ.get("WITHOUT_OPTIONAL")
sys.meta_path.insert(0, _Blocker(_chosen.split(",") if _chosen else BLOCKED))
