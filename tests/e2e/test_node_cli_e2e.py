"""A node that looks miswired says so in its log when it starts in a real dora dataflow (the
warnings themselves, in process: tests/nodes/test_node_cli.py)."""

from __future__ import annotations

import pytest

from tests.support.dora import run_dataflow, script_node


@pytest.mark.dora
def test_a_miswired_node_warns_at_start_in_a_real_dataflow(dora_cli, tmp_path):
    """The encoder wired as `image:` (not `frames:`) ran to the end with 0 frames and exit 0, and
    the camera's WIDHT kept the default width, both silently: now each says so in its log."""
    nodes = [
        script_node(
            "camera",
            "tc-camera-source",
            outputs=["image"],
            env={"WIDTH": 160, "HEIGHT": 120, "WIDHT": 320, "FRAMES": 3, "FPS": 0, "DEVICE": "cpu"},
        ),
        script_node(
            "encoder", "tc-jpeg-encoder", inputs={"image": "camera/image"}, outputs=["jpeg"], env={"DEVICE": "cpu"}
        ),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=120)
    logs = {node: path.read_text(errors="replace") for node, path in run.node_logs().items()}
    assert "env WIDHT is not a setting of tc-camera-source: did you mean WIDTH?" in logs.get("camera", ""), (
        run.explain()
    )
    assert (
        "input `image` is not one this node reads (`frames`, `ack*`): its messages are ignored; did you mean `frames`?"
        in logs.get("encoder", "")
    ), run.explain()
    assert "input `frames` is not wired" in logs.get("encoder", ""), run.explain()
