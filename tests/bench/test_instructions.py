"""bench/instructions.py: instructions per call counted by callgrind, one dump per case."""

from __future__ import annotations

import shutil

import pytest

from tests.support.bench import load_module

# Cases without torch (valgrind runs a torch import for minutes): "double" does "baseline"'s work
# twice, so its count must be twice the baseline's, whatever the machine is doing.
TOY_CASES = """
def make(calls):
    def baseline():
        return sum(range(200))

    def double():
        return sum(range(200)) + sum(range(200))

    return {"baseline": baseline, "double": double}
"""


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_each_case_is_counted_alone_and_the_counts_hold_from_run_to_run(tmp_path, monkeypatch):
    """The toggle and dump markers work with this interpreter (its ctypes and math keep their
    symbols): each case's own instructions, the callback's taken off, the same in two runs."""
    instructions = load_module("instructions", monkeypatch)
    (tmp_path / "toy_cases.py").write_text(TOY_CASES)
    counts = instructions.count({"one": tmp_path, "two": tmp_path}, 50, "toy_cases:make")
    for label in ("one", "two"):
        per_call = counts[label]
        assert set(per_call) == {"baseline", "double"}
        assert per_call["baseline"] > 1000  # sum(range(200)): thousands of instructions, not the callback's
        assert 1.9 < per_call["double"] / per_call["baseline"] < 2.1, per_call
    for case in ("baseline", "double"):
        assert counts["one"][case] == pytest.approx(counts["two"][case], rel=0.01)


def test_dumps_are_read_in_order_and_the_empty_case_taken_off(tmp_path, monkeypatch):
    instructions = load_module("instructions", monkeypatch)
    for n, total in ((1, 7), (2, 1000), (3, 41000), (10, 101000)):  # by number: 10 after 3
        (tmp_path / f"cg.42.{n}").write_text(f"events: Ir\nsummary: {total}\ntotals: {total}\n")
    (tmp_path / "cg.42").write_text("totals: 5\n")  # the last dump, at exit: not a case's
    totals = instructions.dump_totals(tmp_path, "cg.42")
    assert totals == [7, 1000, 41000, 101000]
    assert instructions.per_call(["empty", "baseline", "warm"], totals, 100) == {"baseline": 400.0, "warm": 1000.0}
    with pytest.raises(RuntimeError, match="expected 3 callgrind dumps, got 4"):  # one more would shift them all
        instructions.per_call(["empty", "baseline"], totals, 100)


def test_nothing_counted_is_refused_not_reported_as_zero(monkeypatch):
    """A Python without the symbols callgrind toggles on counts nothing: said, not a ratio of 0/0."""
    instructions = load_module("instructions", monkeypatch)
    with pytest.raises(RuntimeError, match="counted nothing in closure_fcn"):
        instructions.per_call(["empty", "baseline"], [0, 0, 0], 10)
    with pytest.raises(RuntimeError, match="expected 3 callgrind dumps, got 2"):
        instructions.per_call(["empty", "baseline"], [0, 5], 10)
    with pytest.raises(RuntimeError, match="no math_lgamma seen"):
        instructions.per_call(["empty", "baseline"], [], 10)


def test_calls_below_one_are_refused(monkeypatch, capsys):
    instructions = load_module("instructions", monkeypatch)
    with pytest.raises(SystemExit):
        instructions.parse_args(["--calls", "0"])
    assert "--calls: expected at least 1, got 0" in capsys.readouterr().err
