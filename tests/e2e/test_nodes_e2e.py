"""The nodes in real dora dataflows: the default pipeline with `dora up` / `dora start` (what
`make run` does; `dora run` of dataflow.yml is run by test_gpu_check's pipeline part and by
test_delivery_e2e's slow consumer: a third full run here cost 30 s of `make test` and only
repeated them), a receiver that meets corrupted messages, and the nodes reused by name from a
directory outside the repository."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest

from tests.support.dora import (
    ROOT,
    dora_env,
    private_dora,
    python_node,
    run_dataflow,
    run_dora,
    run_flow_file,
    script_node,
)
from tests.support.optional import import_or_skip, needs

pytestmark = pytest.mark.dora

# A busy machine runs these slowly; a limit only bounds a hang (the run is explained either way).
RUN_TIMEOUT_S = 300


def assert_clean(report, inputs):
    assert report["ok"], json.dumps(report, indent=1)
    assert set(report["inputs"]) == set(inputs)
    for name, stats in report["inputs"].items():
        assert stats["bad"] == 0 and stats["missing"] == 0, (name, stats)
        assert stats["expected"] and stats["received"] == stats["expected"], (name, stats)
        assert stats["good"] + stats["rejected"] == stats["received"], (name, stats)


def check_default_run(run):
    from tensor_codec.testing import make_suite

    workdir = run.workdir
    with run.explained():  # any mismatch below shows the receiver's report and log
        assert "tensor receiver summary: PASS" in run.output
        report = run.report("receiver")
        assert_clean(report, {"frames", "decoded", "suite", "load"})
        inputs = report["inputs"]
        assert inputs["frames"]["good"] == 150
        assert (
            inputs["decoded"]["good"] == 150 and inputs["decoded"]["unverified"] == 0
        )  # JPEG round trips within bounds
        saved = sorted((workdir / "out" / "jpeg").glob("*.jpg"))
        assert [p.name for p in saved] == [f"frame-{i:06d}.jpg" for i in range(5)]
        assert inputs["suite"]["good"] == len(make_suite()) and inputs["suite"]["rejected"] == 5
        assert inputs["load"]["good"] == 40
        assert inputs["frames"]["latency_ms"]["p50"] is not None
        check_default_recording(run)
        # Last, as it skips without TorchCodec (the reference decoder): the rest is checked anyway.
        decode_jpeg = import_or_skip("torchcodec.decoders").decode_jpeg
        assert all(decode_jpeg(p, mode="UNCHANGED").shape == (3, 480, 640) for p in saved)  # as stored: RGB


def check_default_recording(run):
    """The rerun sink recorded every JPEG and the suite as what they are (with rerun-sdk), or
    said that it records nothing (without it: REQUIRED=0)."""
    from tensor_codec_nodes.rerun_sink import sdk

    recording = run.workdir / "out" / "pipeline.rrd"
    if sdk.missing() is not None:
        assert "REQUIRED=0: taking the inputs without recording them" in run.output and not recording.exists()
        return
    from tests.support.rerun import read_recording

    entities = read_recording(recording)
    assert entities["/jpeg"].archetypes == {"EncodedImage"} and entities["/jpeg"].rows == 150
    assert entities["/suite/tv/boxes_xyxy"].archetypes == {"Boxes2D"}
    assert entities["/suite/tv/image"].archetypes == {"Image"}
    assert "jpeg: 150 received, 150 shown; suite: 62 received, 57 shown, 5 refused as expected" in run.output
    assert "recording written to out/pipeline.rrd: open it with `rerun out/pipeline.rrd`" in run.output


def copy_default_pipeline(tmp_path):
    flow = tmp_path / "dataflow.yml"
    shutil.copy(ROOT / "dataflow.yml", flow)
    return flow


# What reads as an alarm in a run's output: a passing run has none (dora's own harmless
# diagnostics are hidden by tools/run_quietly.py, as `make run` runs it).
ALARM = re.compile(r"\b(WARN|WARNING|ERROR|CRITICAL|Traceback)\b")


def test_default_pipeline_with_dora_up_and_start(dora_cli, tmp_path):
    """The pipeline as `make run` runs it: on a coordinator and daemon (what `dora up` starts),
    with `dora start --attach` through tools/run_quietly.py. They are this test's own, on free
    ports: one that someone else has up on a shared machine (another test run, a `make run`, a
    stale one) would run our nodes in its environment and directory, and its owner's `dora down`
    would end our run. A passing run reads as passing: no WARN or ERROR line (there were 33 of
    dora's #2742 trace and 5 of the rerun sink's about the corrupted messages it was meant to
    refuse), and one closing line says what dora printed about itself that was hidden."""
    flow = copy_default_pipeline(tmp_path)
    quietly = [sys.executable, str(ROOT / "tools" / "run_quietly.py")]
    with private_dora(dora_cli, tmp_path) as env:
        run = run_dora([*quietly, dora_cli, "start", str(flow), "--attach"], flow, timeout=RUN_TIMEOUT_S, env=env)
    assert run.returncode == 0, run.explain()
    with run.explained():
        assert "tensor receiver: " in run.output  # progress lines reach the attached terminal
        # Without rerun-sdk (.venv-floor) the sink's one warning saying so is about a real problem.
        from tensor_codec_nodes.rerun_sink import sdk

        real = "rerun-sdk is not installed" if sdk.missing() is not None else None
        alarms = [line for line in run.output.splitlines() if ALARM.search(line) and not (real and real in line)]
        assert not alarms, "\n".join(alarms[:20])
        closing = run.stdout.splitlines()[-1]
        assert closing.startswith("(hidden: ") and "dora-rs/dora#2742" in closing, closing
    check_default_run(run)


def test_receiver_logs_and_counts_corrupted_messages_and_goes_on(dora_cli, tmp_path):
    report_path = tmp_path / "report.json"
    nodes = [
        python_node(
            "corrupter",
            ROOT / "tests" / "dora_nodes" / "corrupt_sender.py",
            inputs={"tick": "dora/timer/millis/50"},
            outputs=["tensors"],
        ),
        script_node(
            "receiver",
            "tc-tensor-receiver",
            # Every message is counted: the unacknowledged link must not drop one under load.
            inputs={"tensors": {"source": "corrupter/tensors", "queue_size": 100, "queue_policy": "backpressure"}},
            env={"REPORT": report_path, "STRICT": 0},
        ),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()
    with run.explained():
        stats = run.report("receiver")["inputs"]["tensors"]
        assert (stats["received"], stats["good"], stats["bad"], stats["missing"]) == (6, 2, 4, 0), stats
        reasons = "\n".join(stats["failures"])
        assert "truncated buffer" in reasons and "expected 4000 bytes" in reasons
        assert "broken header" in reasons and "tc.header" in reasons
        assert "no codec keys" in reasons and "tc.header" in reasons
        assert "wrong checksum" in reasons and "checksum: expected crc32:00000000" in reasons
        assert run.output.count("bad message") >= 4  # each one logged with its reason


def test_camera_driven_by_a_dora_timer_and_mono_frames(dora_cli, tmp_path):
    report_path = tmp_path / "report.json"
    nodes = [
        script_node(
            "camera",
            "tc-camera-source",
            inputs={"tick": "dora/timer/millis/20"},
            outputs=["image"],
            env={"WIDTH": 320, "HEIGHT": 240, "CHANNELS": 1, "FRAMES": 12, "DEVICE": "cpu"},
        ),
        script_node(
            "receiver",
            "tc-tensor-receiver",
            inputs={"frames": {"source": "camera/image", "queue_size": 64, "queue_policy": "backpressure"}},
            env={"REPORT": report_path, "STRICT": 1},
        ),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()
    with run.explained():
        stats = run.report("receiver")["inputs"]["frames"]
        assert (stats["good"], stats["missing"], stats["unverified"]) == (12, 0, 0), stats


def test_strict_receiver_fails_the_dataflow(dora_cli, tmp_path):
    nodes = [
        python_node(
            "corrupter",
            ROOT / "tests" / "dora_nodes" / "corrupt_sender.py",
            inputs={"tick": "dora/timer/millis/50"},
            outputs=["tensors"],
        ),
        script_node(
            "receiver",
            "tc-tensor-receiver",
            inputs={"tensors": {"source": "corrupter/tensors", "queue_size": 100, "queue_policy": "backpressure"}},
            env={"STRICT": 1},
        ),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=RUN_TIMEOUT_S)
    assert run.returncode != 0, run.explain()
    with run.explained():
        assert "tensor receiver summary: FAIL" in run.output


def test_nodes_are_reusable_by_name_from_any_directory(dora_cli, tmp_path_factory):
    """A user's own dataflow, outside the repository, names the installed console scripts."""
    import torch

    save_file = pytest.importorskip("safetensors.torch").save_file

    workdir = tmp_path_factory.mktemp("user_project")
    assert ROOT not in workdir.parents
    save_file(
        {"weights": torch.randn(64, 32), "bias": torch.arange(32, dtype=torch.int64)},
        str(workdir / "model.safetensors"),
    )
    flow = workdir / "my_flow.yml"
    flow.write_text(
        """\
nodes:
  - id: cam
    path: tc-camera-source
    outputs: [image]
    env: {WIDTH: "320", HEIGHT: "240", FPS: "50", FRAMES: "20", FORMAT: raw, DEVICE: cpu}
  - id: weights
    path: tc-tensor-sender
    inputs:
      ack: {source: check/ack, queue_size: 64, queue_policy: backpressure}
    outputs: [tensors]
    env: {MODE: safetensors, FILE: model.safetensors, COUNT: "6"}
  - id: check
    path: tc-tensor-receiver
    inputs:
      frames: {source: cam/image, queue_size: 64, queue_policy: backpressure}
      weights: {source: weights/tensors, queue_size: 64, queue_policy: backpressure}
    outputs: [ack]
    env: {REPORT: report.json, STRICT: "1"}
"""
    )
    env = dora_env(repo_on_pythonpath=False)
    env.pop("UV_NO_PROJECT")  # a plain user directory: dora's uv lookup must work as is
    run = run_flow_file(dora_cli, flow, timeout=RUN_TIMEOUT_S, env=env)
    assert run.returncode == 0, run.explain()
    with run.explained():
        report = run.report("check")
        assert_clean(report, {"frames", "weights"})
        assert report["inputs"]["frames"]["good"] == 20
        assert report["inputs"]["weights"]["good"] == 6


@pytest.mark.gpu
def test_every_node_on_cuda(dora_cli, tmp_path):
    report_path = tmp_path / "report.json"
    nodes = [
        script_node(
            "camera",
            "tc-camera-source",
            outputs=["image"],
            env={"FRAMES": 60, "FPS": 60, "WIDTH": 1920, "HEIGHT": 1080, "DEVICE": "cuda"},
            extra={"shared_memory_pool_size": "64MB"},
        ),
        script_node(
            "raw-camera",
            "tc-camera-source",
            outputs=["image"],
            env={"FRAMES": 30, "FORMAT": "raw", "DEVICE": "cuda"},
            extra={"shared_memory_pool_size": "64MB"},
        ),
        script_node(
            "sender",
            "tc-tensor-sender",
            inputs={"ack": {"source": "receiver/ack", "queue_size": 256}},
            outputs=["tensors"],
            env={"MODE": "suite", "DEVICE": "cuda", "CORRUPT": 1},
            extra={"shared_memory_pool_size": "64MB"},
        ),
        script_node(
            "jpeg-encoder",
            "tc-jpeg-encoder",
            inputs={"frames": {"source": "camera/image", "queue_size": 64, "queue_policy": "backpressure"}},
            outputs=["jpeg"],
            env={"DEVICE": "cuda", "WORKERS": 4},
        ),
        script_node(
            "jpeg-decoder",
            "tc-jpeg-decoder",
            inputs={"jpeg": {"source": "jpeg-encoder/jpeg", "queue_size": 64, "queue_policy": "backpressure"}},
            outputs=["image"],
            env={"DEVICE": "cuda"},
            extra={"shared_memory_pool_size": "64MB"},
        ),
        script_node(
            "receiver",
            "tc-tensor-receiver",
            inputs={
                "frames": {"source": "camera/image", "queue_size": 64, "queue_policy": "backpressure"},
                "decoded": {"source": "jpeg-decoder/image", "queue_size": 64, "queue_policy": "backpressure"},
                "raw": {"source": "raw-camera/image", "queue_size": 64, "queue_policy": "backpressure"},
                "suite": {"source": "sender/tensors", "queue_size": 256},
            },
            outputs=["ack"],
            env={"DEVICE": "cuda", "REPORT": report_path, "STRICT": 1},
        ),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()
    with run.explained():
        report = run.report("receiver")
        assert report["device"].startswith("cuda")
        assert_clean(report, {"frames", "decoded", "raw", "suite"})
        assert report["inputs"]["decoded"]["good"] == 60


@needs("torchcodec")  # the encoder's ENGINE=auto choice on the CPU, which its log must show
def test_jpeg_round_trip_through_dora_counts_bad_frames_and_corrupt_jpegs(dora_cli, tmp_path):
    """1080p frames -> encoder -> (a node that adds corrupted copies) -> decoder -> receiver:
    every good frame arrives within JPEG's bounds; each bad frame and corrupt JPEG is logged and
    counted by the node that met it, which goes on."""
    report_path = tmp_path / "report.json"
    nodes = [
        python_node(
            "tamperer",
            ROOT / "tests" / "dora_nodes" / "jpeg_tamperer.py",
            inputs={
                "tick": "dora/timer/millis/50",
                "jpeg": {"source": "encoder/jpeg", "queue_size": 64, "queue_policy": "backpressure"},
            },
            outputs=["frames", "jpeg"],
            extra={"shared_memory_pool_size": "64MB"},
        ),
        # Unacknowledged links: `queue_policy: backpressure` keeps dora from dropping a message on
        # a congested direct path (as in dataflow.yml; a CI run lost one JPEG to the decoder).
        script_node(
            "encoder",
            "tc-jpeg-encoder",
            inputs={"frames": {"source": "tamperer/frames", "queue_size": 64, "queue_policy": "backpressure"}},
            outputs=["jpeg"],
            env={"DEVICE": "cpu", "BATCH": 3},
        ),
        # ENGINE: the encoder's auto choice, the decoder's named: both libraries in one real run.
        script_node(
            "decoder",
            "tc-jpeg-decoder",
            inputs={"jpeg": {"source": "tamperer/jpeg", "queue_size": 64, "queue_policy": "backpressure"}},
            outputs=["image"],
            env={"DEVICE": "cpu", "ENGINE": "torchvision"},
            extra={"shared_memory_pool_size": "64MB"},
        ),
        script_node(
            "receiver",
            "tc-tensor-receiver",
            inputs={"decoded": {"source": "decoder/image", "queue_size": 64, "queue_policy": "backpressure"}},
            env={"REPORT": report_path, "STRICT": 1, "DEVICE": "cpu"},
        ),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()
    with run.explained():  # a lost frame shows in the receiver's report (missing) and the nodes' logs
        report = run.report("receiver")
        assert_clean(report, {"decoded"})
        assert report["inputs"]["decoded"]["good"] == 12 and report["inputs"]["decoded"]["unverified"] == 0
        log = run.output
        assert "received 15, encoded 12, bad 3, failed 0" in log
        assert "received 15, decoded 12, bad 3" in log
        assert "engine=torchcodec subsampling=420: torchcodec on cpu, quality 90" in log  # auto, said once at start
        assert "engine=torchvision: torchvision on cpu, mode" in log  # the decoder: the choice, then the engine
        for reason in (
            "frame.dtype: expected torch.uint8, got torch.float32",
            "channels): expected 1 or 3, got 4",
            "expected (C, H, W), got (64, 64)",
            "end-of-image marker",
            "changed on the way",
            "start-of-image marker",
        ):
            assert reason in log, reason
