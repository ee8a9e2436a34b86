"""Running the benchmarks (bench/*.py) at tiny sizes for their smoke tests (tests/bench/), and
checking the results they write: the envelope of bench/_results.py and figures that are numbers.

A script runs in the test's own interpreter as `python bench/<script>.py ARGS` would run it (its
`__main__` block, its folder first on sys.path), which spares each test a fresh interpreter's
import of torch; sys.argv and sys.path are put back afterwards. A script that exits with an
error (a dataflow that failed, an argument refused) fails the test with what it said.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import math
import runpy
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import ROOT

BENCH = ROOT / "bench"
MACHINE_KEYS = {"platform", "system", "cpus", "cpu_model", "gpu", "python", "torch", "python_speed_us"}


def run_script(name: str, args: list[str], results: Path) -> dict:
    """Runs bench/<name>.py with `args` and `--json results`; -> the results it wrote there."""
    script = BENCH / f"{name}.py"
    saved_argv, saved_path = sys.argv, sys.path[:]
    sys.argv = [str(script), *args, "--json", str(results)]
    sys.path.insert(0, str(BENCH))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            pytest.fail(f"bench/{name}.py {' '.join(args)} exited: {e.code}", pytrace=False)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    assert results.exists(), f"bench/{name}.py wrote no results to {results}"
    return json.loads(results.read_text())


def load_module(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench/<name>.py imported (not run), for tests of its functions; its folder stays first on
    sys.path until the test ends (the scripts import some of their helpers when first used)."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def check_envelope(data: dict, benchmark: str) -> None:
    """The fields every benchmark's results carry (bench/_results.py), and no `skipped`: the
    script measured something."""
    assert data["benchmark"] == benchmark
    assert set(data["machine"]) == MACHINE_KEYS
    assert datetime.datetime.fromisoformat(data["date"]).tzinfo is not None
    assert isinstance(data["baseline"], str) and data["baseline"]
    assert "skipped" not in data, data.get("skipped")


def positive(value) -> bool:
    """A finite number above zero (a time, a rate, a ratio of two of them)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def check_goals(goals: list[dict]) -> None:
    """Goals in bench/_goals.py's shape, each met or not (None: not measured on this machine)."""
    assert goals
    for g in goals:
        assert set(g) == {"name", "measured", "target", "unit", "met", "detail"}, g
        assert g["met"] in (True, False, None), g
        if g["met"] is not None:
            assert isinstance(g["measured"], int | float) and math.isfinite(g["measured"]), g
