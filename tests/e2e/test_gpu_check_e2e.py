"""`make gpu-check` end to end: on a machine without CUDA it says so, checks what the CPU can and
writes its report (running the dora CLI); its pipeline and two-machine parts run real dataflows
with every node on the CPU; an interruption leaves a report. The parts' logic with fakes:
tests/nodes/test_gpu_check.py."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from importlib.metadata import version as metadata_version

import pytest
import torch

from tests.support.collection import collected_here, gpu_tests_collected_here
from tests.support.dora import dora_env
from tests.support.gpu_check import cpu_context
from tests.support.paths import ROOT
from tools.gpu_check import engines, groups, parts
from tools.gpu_check.report import PASS, SKIPPED

CLI = [sys.executable, "-m", "tools.gpu_check"]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")


def imports(module: str) -> bool:
    try:
        importlib.import_module(module)
    except (ImportError, OSError):  # OSError: a native library that does not load
        return False
    return True


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
        "bench: host copies": SKIPPED,
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
    # The optional engines: what is installed here, none run (no CUDA), and why.
    engines_ = {row["engine"]: row for row in report["engines"]}
    assert list(engines_) == [engine.name for engine in engines.ENGINES]
    assert all(row["ran"] == "no" and row["why"].startswith("no CUDA device") for row in engines_.values())
    assert "## Optional engines" in markdown and "| torchcodec | the JPEG nodes' default engine" in markdown
    has_xdist = importlib.util.find_spec("xdist") is not None
    assert (engines_["pytest-xdist"]["installed"] != "missing") == has_xdist
    assert engines.workers(None, engines.cpu_count(), has_xdist).note in engines_["pytest-xdist"]["why"]
    torchcodec_missing = not imports("torchcodec.encoders") or not imports("torchcodec.decoders")
    assert (engines_["torchcodec"]["installed"] == metadata_version("torchcodec")) or torchcodec_missing
    assert bool(report["warnings"]) == bool(torchcodec_missing), report["warnings"]


def test_every_gpu_test_that_runs_a_dataflow_is_under_tests_e2e(request):
    """What the check's xdist scheduler (tools/gpu_check/groups.py) goes by: it sees test ids only."""
    dataflows = collected_here(
        request.session, "gpu and e2e", lambda item: item.get_closest_marker("gpu") and item.get_closest_marker("e2e")
    )
    assert dataflows and all(groups.scope_of(test) == groups.DATAFLOW for test in dataflows), dataflows


def test_without_torchcodec_the_environment_part_says_it_is_missing(tmp_path, monkeypatch):
    """TorchCodec is expected: where it does not import, the environment part's summary and the
    report's first lines say so (the check goes on)."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class Blocker:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torchcodec':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (blocked)', name=name)\n"
        "sys.meta_path.insert(0, Blocker())\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")])))
    part, _, info = parts.environment(cpu_context(tmp_path))
    assert part.status == PASS and part.summary.endswith("; torchcodec MISSING (expected)"), part
    assert "No module named 'torchcodec" in info["optional"]["torchcodec"]["unavailable"]
    assert info["jpeg encoder auto"].startswith("engine=torchvision")  # ENGINE=auto fell back
    [warning] = engines.missing_expected(info["optional"])
    assert engines.EXPECTED_FROM in warning and "(blocked)" in warning


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
