"""tc-monitor in real dora dataflows: the tensor sender's suite, a codec camera and a raw (dora
image) camera into one monitor, whose lines show rate, bandwidth, latency, transport and what each
message is, and whose summary counts every message; and examples/monitor.yml as it is. (The
logic, in process: tests/nodes/test_monitor.py.)"""

from __future__ import annotations

import re
import shutil

import pytest

from tests.support.dora import ROOT, _log_lines, run_dataflow, run_flow_file, script_node

pytestmark = pytest.mark.dora

RUN_TIMEOUT_S = 300  # bounds a hang on a busy machine; a run takes ~20 s
LINE = re.compile(
    r"^monitor: (\w+) \| (\d+\.\d) msg/s \| (\d+(?:\.\d)? (?:B|kB|MB|GB))/s \| latency (?:p50 -?\d+(?:\.\d)? ms, max "
    r"-?\d+(?:\.\d)? ms|-) \| (tc host|tc cuda-ipc|dora image|arrow) \| (.+)$"
)


def monitor_log(run, node_id: str = "monitor") -> list[str]:
    logs = run.node_logs()
    assert node_id in logs, run.explain()
    return _log_lines(logs[node_id])


def summary_rows(lines: list[str]) -> dict[str, list[str]]:
    start = next(i for i, line in enumerate(lines) if line.startswith("monitor summary:"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line or line.startswith(" "):
            break
        rows[line.split()[0]] = line.split()
    return rows


def test_the_monitor_shows_what_flows_from_a_sender_and_two_cameras(dora_cli, tmp_path):
    from tensor_codec.testing import make_suite

    camera = {"FRAMES": 6, "FPS": 10, "WIDTH": 64, "HEIGHT": 56, "DEVICE": "cpu"}
    nodes = [
        script_node(
            "sender", "tc-tensor-sender", outputs=["tensors"], env={"MODE": "suite", "RATE": 20, "DEVICE": "cpu"}
        ),
        script_node("camera", "tc-camera-source", outputs=["image"], env=camera),
        script_node("raw-camera", "tc-camera-source", outputs=["image"], env={**camera, "FORMAT": "raw"}),
        script_node(
            "monitor",
            "tc-monitor",
            inputs={
                "suite": {"source": "sender/tensors", "queue_size": 256},
                "frames": "camera/image",
                "raw": "raw-camera/image",
            },
            env={"PERIOD_S": "0.2", "ECHO": "1"},
        ),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()  # the monitor ended by itself once its senders were done
    lines = monitor_log(run)
    with run.explained():
        periodic = [m for m in map(LINE.match, lines) if m]
        assert {m.group(1) for m in periodic} == {"suite", "frames", "raw"}, lines[:40]
        kinds = {m.group(1): m.group(4) for m in periodic}
        assert kinds == {"suite": "tc host", "frames": "tc host", "raw": "dora image"}
        assert all(float(m.group(2)) > 0 for m in periodic)
        assert any(m.group(1) == "frames" and m.group(5) == "Image uint8[3, 56, 64]" for m in periodic)
        assert any(m.group(1) == "raw" and m.group(5) == "rgb8 64x56" for m in periodic)
        # ECHO=1: each message's structure, from its header (nothing decoded)
        echoed = [line for line in lines if line.startswith("monitor: suite: tc host: ")]
        assert len(echoed) == len(make_suite()), echoed
        structures = [line.removeprefix("monitor: suite: tc host: ") for line in echoed]
        assert any(
            re.fullmatch(r"BoundingBoxes float32\[\d+, 4\] format=XYXY canvas_size=\(\d+, \d+\)", s) for s in structures
        )
        assert any(re.fullmatch(r"KeyPoints float32\[[\d, ]+\] canvas_size=\(\d+, \d+\)", s) for s in structures)
        assert any(s.startswith("PackedSequence(data=Tensor float32[") for s in structures)
        assert "Tensor bfloat16[3, 5]" in structures and "{}" in structures
        assert any(s.startswith("{") and "Image uint8[" in s and "BoundingBoxes" in s for s in structures), structures
        rows = summary_rows(lines)
        assert rows["suite"][:3] == ["suite", str(len(make_suite())), "0"]
        assert rows["frames"][:3] == ["frames", "6", "0"] and rows["raw"][:3] == ["raw", "6", "0"]
        assert rows["raw"][-2:] == ["dora", "image"] and rows["frames"][-2:] == ["tc", "host"]
        assert not [line for line in lines if "ERROR" in line or "Traceback" in line]


def test_the_monitor_example_runs_as_it_is(dora_cli, tmp_path):
    flow = tmp_path / "monitor.yml"
    shutil.copy(ROOT / "examples" / "monitor.yml", flow)
    run = run_flow_file(dora_cli, flow, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()
    lines = monitor_log(run)
    with run.explained():
        rows = summary_rows(lines)
        assert rows["frames"][1] == "20" and rows["raw"][1] == "20" and rows["suite"][2] == "0"
        assert any(
            line.startswith("monitor: frames | ") and line.endswith("| tc host | Image uint8[3, 240, 320]")
            for line in lines
        )
