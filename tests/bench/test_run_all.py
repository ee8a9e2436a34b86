"""bench/run_all.py (`make bench`): it runs every benchmark script once, each with its defaults,
and its docstring lists each one. A script added to bench/ and left out of run_all, or a main()
renamed, fails here instead of in the next full run. The scripts themselves are smoke-tested in
this folder at tiny sizes; here their mains only record that they were called."""

from __future__ import annotations

import importlib
import sys

from tests.support.bench import BENCH, load_module

# The runner, two comparisons (instructions.py needs valgrind and minutes), the plotter.
NOT_BENCHMARKS = {"run_all", "compare_revisions", "instructions", "plots"}


def benchmark_scripts() -> list[str]:
    return sorted(p.stem for p in BENCH.glob("*.py") if not p.stem.startswith("_") and p.stem not in NOT_BENCHMARKS)


def test_run_all_runs_every_benchmark_once_with_its_defaults(monkeypatch, capsys):
    run_all = load_module("run_all", monkeypatch)  # puts bench/ first on sys.path
    called: list[tuple[str, object]] = []
    for name in benchmark_scripts():
        module = importlib.import_module(name)
        monkeypatch.setattr(module, "main", lambda argv=None, name=name: called.append((name, argv)))
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--reps", "3"])
    run_all.main()
    assert sorted(name for name, _ in called) == benchmark_scripts()
    # Arguments go to dora_latency.py; every other script runs with its own defaults.
    assert dict(called) == {name: (["--reps", "3"] if name == "dora_latency" else []) for name in benchmark_scripts()}
    assert "results in out/bench/" in capsys.readouterr().out


def test_run_alls_docstring_lists_every_benchmark():
    text = (BENCH / "run_all.py").read_text()
    missing = [name for name in benchmark_scripts() if f"{name}.py" not in text.split('"""')[1]]
    assert missing == []
