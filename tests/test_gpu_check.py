"""`make gpu-check` itself: on a machine without CUDA it says so, checks what the CPU can and
writes its report; its GPU parts (the pipeline and the two-machine run, their reports, the junit
and benchmark figures, the budget, an interruption) are exercised here with every node on the
CPU, so the one call a lent GPU gets is not spent finding bugs in the check."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import ROOT, dora_env
from tools.gpu_check import parts
from tools.gpu_check.report import FAIL, PASS, SKIPPED, Goal, Part, Report
from tools.gpu_check.runner import Context

CLI = [sys.executable, "-m", "tools.gpu_check"]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")


def gpu_tests_collected_here(session: pytest.Session) -> int:
    """The gpu tests of the suite: counted in this session when it collected every test file
    unfiltered (`make test`: a second collection would cost some 15 s), else collected again."""
    config = session.config
    files = {Path(item.path) for item in session.items}
    if not config.option.markexpr and not config.option.keyword and set((ROOT / "tests").glob("test_*.py")) <= files:
        return sum(1 for item in session.items if item.get_closest_marker("gpu"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True)
    return int(re.search(r"(\d+)/\d+ tests collected", proc.stdout).group(1))


@no_cuda
def test_without_cuda_it_says_so_checks_the_cpu_side_and_exits_0(tmp_path, request):
    proc = subprocess.run([*CLI, "--out", tmp_path / "report"], cwd=ROOT, env=dora_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if "no CUDA device on this machine" in line]
    assert len(said) == 1, proc.stdout
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["gpu-check.log", "report.json", "report.md"]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["ok"] and report["cuda"] is False
    status = {p["name"]: p["status"] for p in report["parts"]}
    assert status == {
        "environment": PASS, "gpu tests": SKIPPED, "pipeline on CUDA": SKIPPED, "two machines on CUDA": SKIPPED,
        "bench: CUDA IPC": SKIPPED, "bench: pinned staging": SKIPPED, "bench: JPEG": SKIPPED,
    }
    gpu_tests = next(p for p in report["parts"] if p["name"] == "gpu tests")
    assert gpu_tests["figures"]["collected"] == gpu_tests_collected_here(request.session) > 0
    env = report["environment"]
    assert env["torch"] == torch.__version__ and env["dora-rs"] and env["PYTORCH_CUDA_ALLOC_CONF"]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert markdown.startswith("# GPU check: PASS") and "no CUDA device" in markdown and "| gpu tests | skipped |" in markdown


def cpu_context(tmp_path: Path, budget: float = 600) -> Context:
    """The check's context with its GPU parts switched on and every node put on the CPU."""
    (tmp_path / "out").mkdir()
    (tmp_path / "work").mkdir()
    ctx = Context(tmp_path / "out", tmp_path / "work", open(tmp_path / "out" / "gpu-check.log", "w"), budget)
    ctx.cuda, ctx.device = True, "cpu"
    return ctx


@pytest.mark.dora
def test_the_pipeline_part_runs_the_default_pipeline_and_reads_its_report(tmp_path):
    part, goals = parts.pipeline(cpu_context(tmp_path))
    assert part.status == PASS, part
    assert part.figures["restored on"] == "cpu" and "6 of 8 nodes on cpu (jpeg-sink, rerun-sink have no device)" in part.summary
    assert part.figures["frames"]["good"] == part.figures["frames"]["received"] == 150
    assert part.figures["suite"]["rejected"] == 5 and part.figures["load"]["transports"] == {"host": 40}
    assert goals == []


@pytest.mark.dora
def test_the_two_machine_part_checks_both_receivers(tmp_path):
    part, _ = parts.cluster(cpu_context(tmp_path))
    assert part.status == PASS, part
    assert part.figures["receiver on A"]["big"] == {"host": 8} and part.figures["receiver on B"]["ok"] is True


def test_junit_counts_and_the_race_trials(tmp_path):
    suite = tmp_path / "test_sample.py"
    suite.write_text(textwrap.dedent(f"""
        import pytest
        def test_ok(): pass
        def test_broken(): assert False
        @pytest.mark.skip(reason="no")
        def test_skipped(): pass
        def {parts.RACE_TEST}(): pass
    """))
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", suite], cwd=tmp_path, capture_output=True)
    counts, failed, race = parts.read_junit(junit)
    assert counts == {"passed": 2, "failed": 1, "skipped": 1}
    assert failed == ["test_sample::test_broken"] and race is True
    assert parts.read_junit(tmp_path / "missing.xml") == ({"passed": 0, "failed": 0, "skipped": 0}, [], None)


def test_a_benchmark_part_reports_the_goals_its_script_measured(tmp_path):
    script = tmp_path / "fake_bench.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        path = sys.argv[sys.argv.index("--json") + 1]
        goals = [{"name": "flat", "measured": 1.2, "target": "<= 1.5", "unit": "x", "met": True, "detail": "ratio 1.20"},
                 {"name": "fast", "measured": 12.0, "target": ">= 30", "unit": "x", "met": False, "detail": "12.0x"}]
        json.dump({"speedup": 12.0, "goals": goals}, open(path, "w"))
    """))
    ctx = cpu_context(tmp_path)
    part, goals = parts.benchmark("bench: fake", str(script), [], 60)(ctx)
    assert part.status == PASS and part.summary == "1 of 2 goals met" and part.figures == {"speedup": 12.0}
    assert [(g.name, g.met, g.source) for g in goals] == [("flat", True, "bench: fake"), ("fast", False, "bench: fake")]
    report = Report(tmp_path / "r", 100)
    report.add(part, goals)
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "| fast | >= 30 x | 12 x (12.0x) | **not met** |" in markdown
    assert "| flat | <= 1.5 x | 1.2 x (ratio 1.20) | met |" in markdown


def test_a_spent_budget_fails_the_parts_it_could_not_run(tmp_path):
    proc = subprocess.run([*CLI, "--out", tmp_path, "--budget", "0"], cwd=ROOT, env=dora_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    report = json.loads((tmp_path / "report.json").read_text())
    not_run = [p["name"] for p in report["parts"] if p["summary"] == "not run: the 0 s budget was spent"]
    assert not_run == [step.title for step in parts.PARTS]


def test_an_interrupted_check_stops_its_part_and_leaves_a_report(tmp_path):
    proc = subprocess.Popen([*CLI, "--out", tmp_path], cwd=ROOT, env=dora_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if "] environment:" in line:
                break
        proc.send_signal(signal.SIGINT)  # while the next part (collecting or running the gpu tests) runs
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] is False and report["parts"][-1]["name"] == "interrupted"
    assert report["parts"][0]["name"] == "environment"


def test_a_part_that_breaks_is_a_failed_part_and_the_check_goes_on(tmp_path):
    from tools.gpu_check.__main__ import guarded

    def broken(ctx):
        raise KeyError("speedup")

    broken.title = "bench: broken"
    part, goals = guarded(broken, cpu_context(tmp_path))
    assert part.status == FAIL and part.summary == "the check itself broke: KeyError: 'speedup'" and "KeyError" in part.tail
    assert goals == []


def test_a_figure_that_is_not_a_number_still_makes_strict_json(tmp_path):
    report = Report(tmp_path, 10)
    report.add(Part("bench: x", PASS, 1.0, "", {"p50": float("nan")}),
               [Goal("flat", "<= 1.5", float("inf"), "x", False, "", "bench: x")])
    data = json.loads((tmp_path / "report.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert data["parts"][0]["figures"]["p50"] == "nan" and data["goals"][0]["measured"] == "inf"
