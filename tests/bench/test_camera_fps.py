"""bench/camera_fps.py (with bench/_pa_array_camera.py): the synthetic camera into the tensor
receiver through real dora dataflows, tc-camera-source against the flat pa.array camera."""

from __future__ import annotations

import argparse
import sys

import pytest

from tests.support.bench import check_envelope, check_goals, load_module, positive, run_script

FRAMES = 5


@pytest.mark.dora
@pytest.mark.slow  # two dataflows
def test_camera_fps_runs_the_cameras_and_the_receiver_verifies_each_frame(dora_cli, tmp_path):
    """One round of a few small frames from the pa.array camera and from tc-camera-source
    (FORMAT=codec; FORMAT=raw is the same node with another setting, left out for time): each
    dataflow starts, the receiver gets every frame and verifies it (VERIFY=full), and the runs
    and the summary are written with rates and latencies."""
    args = ["--frames", str(FRAMES), "--fps", "60", "--rounds", "1", "--width", "64", "--height", "64"]
    data = run_script("camera_fps", [*args, "--contenders", "tc"], tmp_path / "camera_fps.json")
    check_envelope(data, "camera_fps")
    assert (data["width"], data["height"], data["frames"], data["verify"]) == (64, 64, FRAMES, "full")
    assert [r["contender"] for r in data["runs"]] == ["pa.array", "tc"]
    for run in data["runs"]:
        assert (run["received"], run["good"], run["bad"], run["missing"]) == (FRAMES, FRAMES, 0, 0), run
        assert all(positive(run[k]) for k in ("fps", "p50", "p99", "wall_s")), run
    summary = {s["contender"]: s for s in data["summary"]}
    assert list(summary) == ["pa.array", "tc"]
    assert summary["pa.array"]["fps_ratio"] == 1.0
    for s in summary.values():
        assert all(positive(s[k]) for k in ("fps", "p50", "p99", "fps_ratio", "p50_ratio", "p99_ratio")), s
    check_goals(data["goals"])


def test_each_contender_gets_its_camera_and_the_same_receiver(monkeypatch, tmp_path):
    """The dataflow of each contender: the pa.array camera script, or tc-camera-source with
    FORMAT=codec (tc) or FORMAT=raw (raw), at the asked size and rate, into the same receiver."""
    camera_fps = load_module("camera_fps", monkeypatch)
    monkeypatch.setattr(camera_fps, "executable", lambda name: f"/bin/{name}")
    args = argparse.Namespace(
        width=64, height=64, fps=60.0, frames=5, pool="64MB", queue=64, verify="full", node_env={"A": "1"}
    )
    flows = {c: camera_fps.dataflow(c, args, tmp_path / "report.json") for c in camera_fps.CONTENDERS}
    for flow in flows.values():
        camera, receiver = flow["nodes"]
        assert camera["env"]["WIDTH"] == "64" and camera["env"]["FRAMES"] == "5" and camera["env"]["A"] == "1"
        assert receiver == flows["pa.array"]["nodes"][1]
        assert receiver["inputs"]["frames"]["source"] == "camera/image"
    assert flows["pa.array"]["nodes"][0]["path"] == sys.executable
    assert flows["pa.array"]["nodes"][0]["args"].endswith("_pa_array_camera.py")
    assert [flows[c]["nodes"][0]["env"].get("FORMAT") for c in ("tc", "raw")] == ["codec", "raw"]
    assert {flows[c]["nodes"][0]["path"] for c in ("tc", "raw")} == {"/bin/tc-camera-source"}
