"""Mistakes fail the run, in a real dora dataflow: a misspelt setting and an input wired under an
id the node does not read stop the node before the dataflow starts (exit status 2, the log saying
what to write instead), and a receiver that met a bad message fails `dora run` without STRICT set.
(The checks themselves, in process: tests/nodes/test_node_cli.py.)"""

from __future__ import annotations

import pytest

from tests.support.dora import ROOT, python_node, run_dataflow, script_node

# Each run below ends in seconds once the mistake is caught; the limit only bounds a hang (a
# camera with FRAMES left at 0 runs forever), kept generous for a machine busy with other tests.
TIMEOUT_S = 90


def logs_and_output(run) -> str:
    return "\n".join(path.read_text(errors="replace") for path in run.node_logs().values()) + run.output


def small_camera(**env) -> dict:
    """A CPU camera node of 160x120 frames, with `env` on top."""
    settings = {"WIDTH": 160, "HEIGHT": 120, "DEVICE": "cpu", **env}
    return script_node("camera", "tc-camera-source", outputs=["image"], env=settings)


def refused_to_start(run, node_id: str) -> str:
    """Asserts that `node_id` refused to start (exit 2) and so failed the run; -> what the run
    logged and printed, for the reason."""
    assert run.returncode != 0
    assert f"Node `{node_id}` failed: exited with code 2" in run.output
    return logs_and_output(run)


@pytest.mark.dora
def test_a_misspelt_setting_stops_the_run_instead_of_running_forever(dora_cli, tmp_path):
    """FRAMEZ for FRAMES only warned: FRAMES kept its default (0, endless) and the camera never
    ended. Now the camera refuses to start, naming both names, and `dora run` fails promptly."""
    nodes = [
        small_camera(FRAMEZ=10, FPS=30),
        script_node("receiver", "tc-tensor-receiver", inputs={"frames": "camera/image"}, env={"DEVICE": "cpu"}),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=TIMEOUT_S)
    with run.explained():
        said = refused_to_start(run, "camera")
        assert "env FRAMEZ is not a setting of tc-camera-source: did you mean FRAMES?" in said
        assert "`tc-camera-source --help` lists its settings" in said


@pytest.mark.dora
def test_an_input_wired_under_a_wrong_id_stops_the_run(dora_cli, tmp_path):
    """The JPEG sink wired as `jpg:` (it reads `jpeg`) ignored every message: `dora run` exited 0
    with 0 JPEGs saved. Now the sink refuses to start, naming the id and the one it reads."""
    nodes = [
        small_camera(FRAMES=3, FPS=0),
        script_node(
            "encoder", "tc-jpeg-encoder", inputs={"frames": "camera/image"}, outputs=["jpeg"], env={"DEVICE": "cpu"}
        ),
        script_node("sink", "tc-jpeg-sink", inputs={"jpg": "encoder/jpeg"}, env={"DIR": tmp_path / "jpegs"}),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=TIMEOUT_S)
    with run.explained():
        said = refused_to_start(run, "sink")
        assert "input `jpg` is not one this node reads (`jpeg`)" in said
        assert "did you mean `jpeg`?" in said
        assert not list((tmp_path / "jpegs").glob("*.jpg"))


@pytest.mark.dora
def test_a_receiver_that_met_a_bad_message_fails_the_run_without_strict(dora_cli, tmp_path):
    """Without STRICT=1 the receiver counted 4 bad messages and exited 0, and so did `dora run`:
    the receiver's verdict is now its exit status by default."""
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
            env={"REPORT": tmp_path / "report.json", "DEVICE": "cpu", "PROGRESS_S": 0},
        ),
    ]
    run = run_dataflow(dora_cli, tmp_path, nodes, timeout=TIMEOUT_S)
    with run.explained():
        stats = run.report("receiver")["inputs"]["tensors"]
        assert (stats["good"], stats["bad"]) == (2, 4), stats
        assert run.returncode != 0
        assert "Node `receiver` failed: exited with code 1" in run.output
