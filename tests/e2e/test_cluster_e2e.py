"""Two machines, A and B, as a coordinator and two daemons on loopback: the nodes deployed on
both, tensors, TVTensors, nested structures and 12 MB tensors reaching the remote receiver
bit-exact (each message checksummed: structure, types, TVTensor attributes, values), and the
cluster runner tearing down exactly what it started, also when interrupted."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from tensor_codec.testing import make_suite
from tests.support.dora import ROOT, DataflowRun, dora_env, node_script, run_dora
from tests.support.waiting import wait_until

pytestmark = pytest.mark.dora

RUNNER = [sys.executable, "-m", "tools.local_cluster"]


def copy_cluster_flow(tmp_path: Path) -> Path:
    """dataflow-cluster.yml with the console scripts by absolute path (no PATH assumptions)."""
    data = yaml.safe_load((ROOT / "dataflow-cluster.yml").read_text())
    for node in data["nodes"]:
        node["path"] = node_script(node["path"])
    flow = tmp_path / "dataflow-cluster.yml"
    flow.write_text(yaml.safe_dump(data, sort_keys=False))
    return flow


def run_cluster(flow: Path, *reports: str, timeout: float = 360) -> DataflowRun:
    """The cluster runner on `flow`; a failure is explained with the receivers' reports and logs."""
    args = [*RUNNER, str(flow), "--timeout", str(timeout - 60)]
    for report in reports:
        args += ["--report", report]
    return run_dora(args, flow, timeout=timeout, env=dora_env())


def still_alive(pids: dict[str, int]) -> list[str]:
    return [name for name, pid in pids.items() if alive(pid)]


def started_pids(output: str) -> dict[str, int]:
    return {name: int(pid) for name, pid in re.findall(r"local_cluster: started (\S+) \(pid (\d+)", output)}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its exit status is left


def processes_inside(directory: Path) -> list[int]:
    """Live processes whose working directory is under `directory` (the nodes of the run)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd.startswith(str(directory)) and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_two_daemon_pipeline_delivers_everything_bit_exact_to_the_remote_receiver(tmp_path):
    flow = copy_cluster_flow(tmp_path)
    run = run_cluster(flow, "out/cluster-report-A.json", "out/cluster-report-B.json")
    output = run.output
    assert run.returncode == 0, run.explain()
    with run.explained():
        pids = started_pids(output)
        assert set(pids) == {"coordinator", "daemon-A", "daemon-B"}
        # Stopped (SIGTERM, then SIGKILL) and waited for by the runner; gone once the kernel is done.
        wait_until(lambda: still_alive(pids), lambda left: not left, describe="what the runner started to be gone")
        assert "daemon `B`" in output and "daemon `A`" in output  # the nodes really ran on both
        on_gpu = torch.cuda.is_available()
        for machine in "AB":
            report = run.report(f"receiver-{machine.lower()}")  # out/cluster-report-{machine}.json
            assert report["ok"], json.dumps(report, indent=1)
            suite, big = report["inputs"]["suite"], report["inputs"]["big"]
            # Every case of the suite: all dtypes and layouts, each TVTensor class with its
            # attributes, PackedSequences, nested dict/list/tuple structures.
            assert suite["good"] == suite["received"] == len(make_suite()), suite
            assert big["good"] == big["received"] == 8, big  # 12 MB and 1 MB tensors, in turn
            assert suite["bad"] == big["bad"] == 0 and suite["missing"] == big["missing"] == 0
            assert report["device"] == ("cuda:0" if on_gpu else "cpu")
            if not on_gpu:
                assert suite["transports"] == {"host": len(make_suite())} and big["transports"] == {"host": 8}
        # No GPU here: every output carries host bytes, and the sender says why.
        if not on_gpu:
            assert "output 'remote': transport host (no CUDA tensor in the message)" in output
        assert not (tmp_path / ".dataflow-cluster.cluster-run.yml").exists()


@pytest.mark.gpu
def test_on_a_gpu_the_local_receiver_gets_cuda_ipc_and_the_remote_one_host_bytes_on_its_gpu(tmp_path):
    flow = copy_cluster_flow(tmp_path)
    run = run_cluster(flow, "out/cluster-report-A.json", "out/cluster-report-B.json")
    output = run.output
    assert run.returncode == 0, run.explain()
    with run.explained():
        assert (
            "output 'tensors': transport cuda-ipc (all 1 consumer(s) on this machine and the data on a GPU)" in output
        )
        assert re.search(r"output 'remote': transport host \(consumer receiver-b/\w+ runs on machine 'B'", output)
        assert re.search(r"tensors by cuda-ipc: \d+ sent", output)
        for machine, transport in (("A", "cuda-ipc"), ("B", "host")):
            report = run.report(f"receiver-{machine.lower()}")  # out/cluster-report-{machine}.json
            assert report["ok"] and report["device"].startswith("cuda"), json.dumps(report, indent=1)
            assert report["inputs"]["big"]["good"] == 8 and report["inputs"]["suite"]["good"] == len(make_suite())
            # A's receiver read GPU memory shared by CUDA IPC; B's restored host bytes onto its GPU.
            assert report["inputs"]["big"]["transports"] == {transport: 8}, report["inputs"]["big"]
            suite = report["inputs"]["suite"]["transports"]
            if transport == "host":
                assert suite == {"host": len(make_suite())}, suite
            else:  # a suite case with no tensor at all goes as host bytes: nothing to share
                assert suite.get("cuda-ipc", 0) >= len(make_suite()) - 3 and set(suite) <= {"cuda-ipc", "host"}, suite


def endless_flow(tmp_path: Path) -> Path:
    flow = {
        "nodes": [
            {
                "id": "sender",
                "path": node_script("tc-tensor-sender"),
                "deploy": {"machine": "A"},
                "outputs": ["tensors"],
                "env": {"MODE": "random", "SIZES": "64KB", "COUNT": "0", "RATE": "20", "DEVICE": "cpu"},
            },
            {
                "id": "receiver",
                "path": node_script("tc-tensor-receiver"),
                "deploy": {"machine": "B"},
                "inputs": {"tensors": "sender/tensors"},
                "env": {"DEVICE": "cpu"},
            },
        ]
    }
    path = tmp_path / "endless.yml"
    path.write_text(yaml.safe_dump(flow, sort_keys=False))
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_tears_down_only_what_it_started(tmp_path, sig):
    flow = endless_flow(tmp_path)
    # A bystander in the same process-group-free situation: it must survive the teardown.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"], start_new_session=True)
    args = [*RUNNER, str(flow), "--timeout", "300"]
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=dora_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    try:
        deadline = time.monotonic() + 240  # a busy machine starts three dora processes and two nodes slowly
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "random mode on cpu" in line:  # the sender runs: the dataflow is up on both daemons
                break
        assert any("random mode on cpu" in line for line in lines), "".join(lines)[-4000:]
        assert processes_inside(tmp_path), "the nodes should be running in the dataflow's directory"
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=120)
        output = "".join(lines) + rest
        run = DataflowRun(args, tmp_path, proc.returncode, output, "", receivers={"receiver"})
        with run.explained():
            assert proc.returncode == 130
            assert "interrupted; stopped everything it started" in output
            pids = started_pids(output)
            assert set(pids) == {"coordinator", "daemon-A", "daemon-B"}
            # Signalled (SIGTERM, then SIGKILL) by the runner; gone once the kernel has finished them.
            wait_until(lambda: still_alive(pids), lambda left: not left, describe="what the runner started to be gone")
            wait_until(
                lambda: processes_inside(tmp_path),
                lambda left: left == [],
                describe="the nodes to go with their daemons",
            )
            assert bystander.poll() is None
            assert not (tmp_path / ".endless.cluster-run.yml").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        bystander.kill()
        bystander.wait()


def test_a_dataflow_without_machines_is_refused_clearly(tmp_path):
    flow = tmp_path / "plain.yml"
    shutil.copy(ROOT / "dataflow.yml", flow)
    proc = subprocess.run(
        [*RUNNER, str(flow)], cwd=tmp_path, env=dora_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "node 'camera': expected `deploy: {machine: ...}`" in proc.stderr
    assert "started" not in proc.stdout  # nothing was started for it


def test_a_cluster_that_cannot_start_says_why_and_leaves_nothing(tmp_path):
    from tools.local_cluster import ClusterError, LocalCluster

    with pytest.raises(ClusterError, match="machines: expected distinct machine ids, got \\['A', 'A'\\]"):
        LocalCluster(["A", "A"], tmp_path, dora="/bin/false").start()
    # A coordinator that exits is seen at once; the limit only matters to one that hangs.
    cluster = LocalCluster(["A", "B"], tmp_path, dora="/bin/false", ready_timeout_s=60)
    with pytest.raises(ClusterError, match="coordinator exited with 1"):
        with cluster:
            pass
    assert cluster.processes == []  # stopped after each failed attempt
