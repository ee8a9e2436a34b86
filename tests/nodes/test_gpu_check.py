"""`make gpu-check` itself, its GPU parts exercised with every node on the CPU (the junit and
benchmark figures, the budget, a part that breaks, strict JSON), so the one call a lent GPU gets is
not spent finding bugs in the check. End to end (without CUDA, the pipeline and two-machine parts,
an interruption): tests/e2e/test_gpu_check_e2e.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.support.dora import dora_env
from tests.support.gpu_check import cpu_context
from tests.support.paths import ROOT
from tools.gpu_check import parts
from tools.gpu_check.report import FAIL, PASS, Goal, Part, Report

CLI = [sys.executable, "-m", "tools.gpu_check"]


@pytest.mark.slow  # a pytest run in a fresh interpreter
def test_junit_counts_and_the_race_trials(tmp_path):
    suite = tmp_path / "test_sample.py"
    suite.write_text(
        textwrap.dedent(f"""
        import pytest
        def test_ok(): pass
        def test_broken(): assert False
        @pytest.mark.skip(reason="no")
        def test_skipped(): pass
        def {parts.RACE_TEST}(): pass
    """)
    )
    junit = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", suite],
        cwd=tmp_path,
        capture_output=True,
    )
    counts, failed, race = parts.read_junit(junit)
    assert counts == {"passed": 2, "failed": 1, "skipped": 1}
    assert failed == ["test_sample::test_broken"] and race is True
    assert parts.read_junit(tmp_path / "missing.xml") == ({"passed": 0, "failed": 0, "skipped": 0}, [], None)


def test_a_benchmark_part_reports_the_goals_its_script_measured(tmp_path):
    script = tmp_path / "fake_bench.py"
    script.write_text(
        textwrap.dedent("""
        import json, sys
        path = sys.argv[sys.argv.index("--json") + 1]
        goals = [
            {"name": "flat", "measured": 1.2, "target": "<= 1.5", "unit": "x", "met": True, "detail": "ratio 1.20"},
            {"name": "fast", "measured": 12.0, "target": ">= 30", "unit": "x", "met": False, "detail": "12.0x"},
        ]
        json.dump({"speedup": 12.0, "goals": goals}, open(path, "w"))
    """)
    )
    ctx = cpu_context(tmp_path)
    part, goals = parts.benchmark("bench: fake", str(script), [], 60)(ctx)
    assert part.status == PASS and part.summary == "1 of 2 goals met" and part.figures == {"speedup": 12.0}
    assert [(g.name, g.met, g.source) for g in goals] == [("flat", True, "bench: fake"), ("fast", False, "bench: fake")]
    report = Report(tmp_path / "r", 100)
    report.add(part, goals)
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "| fast | >= 30 x | 12 x (12.0x) | **not met** |" in markdown
    assert "| flat | <= 1.5 x | 1.2 x (ratio 1.20) | met |" in markdown


@pytest.mark.slow  # the check in a fresh interpreter
def test_a_spent_budget_fails_the_parts_it_could_not_run(tmp_path):
    proc = subprocess.run(
        [*CLI, "--out", tmp_path, "--budget", "0"],
        cwd=ROOT,
        env=dora_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    report = json.loads((tmp_path / "report.json").read_text())
    not_run = [p["name"] for p in report["parts"] if p["summary"] == "not run: the 0 s budget was spent"]
    assert not_run == [step.title for step in parts.PARTS]


def test_a_part_that_breaks_is_a_failed_part_and_the_check_goes_on(tmp_path):
    from tools.gpu_check.__main__ import guarded

    def broken(ctx):
        raise KeyError("speedup")

    broken.title = "bench: broken"
    part, goals = guarded(broken, cpu_context(tmp_path))
    assert (
        part.status == FAIL
        and part.summary == "the check itself broke: KeyError: 'speedup'"
        and "KeyError" in part.tail
    )
    assert goals == []


def test_a_figure_that_is_not_a_number_still_makes_strict_json(tmp_path):
    report = Report(tmp_path, 10)
    report.add(
        Part("bench: x", PASS, 1.0, "", {"p50": float("nan")}),
        [Goal("flat", "<= 1.5", float("inf"), "x", False, "", "bench: x")],
    )
    data = json.loads(
        (tmp_path / "report.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}")
    )
    assert data["parts"][0]["figures"]["p50"] == "nan" and data["goals"][0]["measured"] == "inf"
