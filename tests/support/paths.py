"""Where things are: the repository, the tests, the test-only dora nodes, the golden messages."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "nodes"
TESTS = ROOT / "tests"
DORA_NODES = TESTS / "dora_nodes"  # test-only dora nodes (run with support.dora.python_node)
GOLDEN = TESTS / "golden"
