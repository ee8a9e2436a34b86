"""`make gpu-check` end to end: on a machine without CUDA it says so, checks what the CPU can and
writes its report (running the dora CLI); its pipeline and two-machine parts run real dataflows
with every node on the CPU; an interruption leaves a report. The parts' logic with fakes:
tests/nodes/test_gpu_check.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.dora import dora_env
from tests.support.gpu_check import cpu_context
from tests.support.paths import ROOT
from tools.gpu_check import parts
from tools.gpu_check.report import PASS, SKIPPED

CLI = [sys.executable, "-m", "tools.gpu_check"]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")


def gpu_tests_collected_here(session: pytest.Session) -> int:
    """The gpu tests of the suite: counted in this session when it collected every test file
    unfiltered (`make test`: a second collection would cost some 15 s), else collected again."""
    config = session.config
    files = {Path(item.path) for item in session.items}
    if not config.option.markexpr and not config.option.keyword and set((ROOT / "tests").rglob("test_*.py")) <= files:
        return sum(1 for item in session.items if item.get_closest_marker("gpu"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return int(re.search(r"(\d+)/\d+ tests collected", proc.stdout).group(1))


@no_cuda
def test_without_cuda_it_says_so_checks_the_cpu_side_and_exits_0(tmp_path, request):
    proc = subprocess.run(
        [*CLI, "--out", tmp_path / "report"], cwd=ROOT, env=dora_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if "no CUDA device on this machine" in line]
    assert len(said) == 1, proc.stdout
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["gpu-check.log", "report.json", "report.md"]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["ok"] and report["cuda"] is False
    status = {p["name"]: p["status"] for p in report["parts"]}
    assert status == {
        "environment": PASS,
        "gpu tests": SKIPPED,
        "pipeline on CUDA": SKIPPED,
        "two machines on CUDA": SKIPPED,
        "bench: CUDA IPC": SKIPPED,
        "bench: pinned staging": SKIPPED,
        "bench: JPEG": SKIPPED,
    }
    gpu_tests = next(p for p in report["parts"] if p["name"] == "gpu tests")
    assert gpu_tests["figures"]["collected"] == gpu_tests_collected_here(request.session) > 0
    env = report["environment"]
    assert env["torch"] == torch.__version__ and env["dora-rs"] and env["PYTORCH_CUDA_ALLOC_CONF"]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert (
        markdown.startswith("# GPU check: PASS")
        and "no CUDA device" in markdown
        and "| gpu tests | skipped |" in markdown
    )


@pytest.mark.dora
def test_the_pipeline_part_runs_the_default_pipeline_and_reads_its_report(tmp_path):
    part, goals = parts.pipeline(cpu_context(tmp_path))
    assert part.status == PASS, part
    assert (
        part.figures["restored on"] == "cpu"
        and "6 of 8 nodes on cpu (jpeg-sink, rerun-sink have no device)" in part.summary
    )
    assert part.figures["frames"]["good"] == part.figures["frames"]["received"] == 150
    assert part.figures["suite"]["rejected"] == 5 and part.figures["load"]["transports"] == {"host": 40}
    assert goals == []


@pytest.mark.dora
def test_the_two_machine_part_checks_both_receivers(tmp_path):
    part, _ = parts.cluster(cpu_context(tmp_path))
    assert part.status == PASS, part
    assert part.figures["receiver on A"]["big"] == {"host": 8} and part.figures["receiver on B"]["ok"] is True


def test_an_interrupted_check_stops_its_part_and_leaves_a_report(tmp_path):
    proc = subprocess.Popen(
        [*CLI, "--out", tmp_path], cwd=ROOT, env=dora_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
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
