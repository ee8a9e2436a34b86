"""Which of the suite's tests a marker expression selects, for the tests that compare another
collection with this one (the GPU check's count, the layered install's `make test-gpu`, the
collection without the optional packages). Under `make test` this session already collected every
test file unfiltered, and reading its items costs nothing; anything narrower (one file, `-m`, `-k`)
collects the suite again in a fresh interpreter, some 10 to 15 s on 2 cores."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.paths import ROOT

__all__ = ["DESELECTED", "collect_afresh", "collected_here", "gpu_tests_collected_here"]

# Set by tests/conftest.py when this session deselected tests (`--deselect`, `--lf`, a plugin):
# its items are then not the whole suite, whatever files they come from.
DESELECTED = pytest.StashKey[bool]()


def collected_here(session: pytest.Session, markexpr: str, has: Callable[[pytest.Item], object]) -> list[str]:
    """The ids of the suite's tests that `markexpr` selects ("" for all): from `session` when it
    collected every test file unfiltered (`has(item)` says whether the expression holds for an
    item), else collected again."""
    config = session.config
    files = {Path(item.path) for item in session.items}
    unfiltered = not (config.option.markexpr or config.option.keyword or config.stash.get(DESELECTED, False))
    if unfiltered and set((ROOT / "tests").rglob("test_*.py")) <= files:
        return [item.nodeid for item in session.items if has(item)]
    return collect_afresh(markexpr)


def collect_afresh(markexpr: str = "", env: dict[str, str] | None = None) -> list[str]:
    """The ids a fresh interpreter collects over tests/ (`markexpr`: only those it selects; `env`:
    its environment, this one's by default), after checking that pytest reported no error."""
    marks = ["-m", markexpr] if markexpr else []
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *marks, "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    collected = re.search(r"\d+(/\d+)? tests? collected", proc.stdout)
    assert proc.returncode == 0 and collected and "error" not in summary, output[-6000:]  # errors are listed last
    return [line for line in proc.stdout.splitlines() if "::" in line]


def gpu_tests_collected_here(session: pytest.Session) -> int:
    return len(collected_here(session, "gpu", lambda item: item.get_closest_marker("gpu")))
