"""Where things are: the repository, the tests, the test-only dora nodes, the golden messages, the
nodes' console scripts as pyproject.toml registers them."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tensor_codec_nodes.common.registry import scripts_of

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "nodes"
TESTS = ROOT / "tests"
DORA_NODES = TESTS / "dora_nodes"  # test-only dora nodes (run with support.dora.python_node)
GOLDEN = TESTS / "golden"
PYPROJECT = ROOT / "pyproject.toml"


def registered_node_scripts() -> dict[str, str]:
    """{node package: console script} as pyproject.toml's [project.scripts] registers them (the
    checkout's; tensor_codec_nodes.common.registry reads the installed metadata of the same)."""
    return scripts_of(tomllib.loads(PYPROJECT.read_text())["project"]["scripts"].items())
