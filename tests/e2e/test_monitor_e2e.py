"""tc-monitor in real dora dataflows: the tensor sender's suite, a codec camera and a raw (dora
image) camera into one monitor, whose lines show rate, bandwidth, latency, transport and what each
message is, and whose summary counts every message: examples/monitor.yml, shortened. (The
logic, in process: tests/nodes/test_monitor.py.)"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support.dora import ROOT, _log_lines, run_flow_file

pytestmark = pytest.mark.dora

RUN_TIMEOUT_S = 300  # bounds a hang on a busy machine; a run takes ~20 s
LINE = re.compile(
    r"^monitor: (\w+) \| (\d+\.\d) msg/s \| (\d+(?:\.\d)? (?:B|kB|MB|GB))/s \| latency (?:p50 -?\d+(?:\.\d)? ms, max "
    r"-?\d+(?:\.\d)? ms|-) \| (tc host|tc cuda-ipc|dora image|arrow) \| (.+)$"
)


def monitor_log(run, node_id: str = "monitor", stream: str | None = None) -> list[str]:
    logs = run.node_logs()
    assert node_id in logs, run.explain()
    return _log_lines(logs[node_id], stream)


def summary_rows(lines: list[str]) -> dict[str, list[str]]:
    start = next(i for i, line in enumerate(lines) if line.startswith("monitor summary:"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line or line.startswith(" "):
            break
        rows[line.split()[0]] = line.split()
    return rows


def test_the_monitor_example_shows_what_flows_from_a_sender_and_two_cameras(dora_cli, tmp_path):
    """examples/monitor.yml as it is, but for shorter cameras and ECHO=1 (a line per message, so
    every structure can be checked): one run of the example checks it all."""
    from tensor_codec.testing import make_suite

    flow = yaml.safe_load((ROOT / "examples" / "monitor.yml").read_text())
    nodes = {node["id"]: node for node in flow["nodes"]}
    for camera in ("camera", "raw-camera"):
        nodes[camera]["env"].update({"FRAMES": 6, "WIDTH": 64, "HEIGHT": 56})
    nodes["monitor"]["env"].update({"PERIOD_S": "0.2", "ECHO": "1"})
    path = tmp_path / "monitor.yml"
    path.write_text(yaml.safe_dump(flow, sort_keys=False))
    run = run_flow_file(dora_cli, path, timeout=RUN_TIMEOUT_S)
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
        rows = summary_rows(monitor_log(run, stream="stdout"))  # the refusals' stderr kept out of the table
        assert rows["suite"][:3] == ["suite", str(len(make_suite())), "0"]
        assert rows["frames"][:3] == ["frames", "6", "0"] and rows["raw"][:3] == ["raw", "6", "0"]
        assert rows["raw"][-2:] == ["dora", "image"] and rows["frames"][-2:] == ["tc", "host"]
        assert not [line for line in lines if "ERROR" in line or "Traceback" in line]
