"""tc-rerun-sink in a real dora dataflow: cameras, JPEGs and the suite recorded to a file and
streamed to a viewer (rerun's own server) at once. rerun-sdk is an optional extra: without it this
skips. The sink's views, unit by unit: tests/nodes/test_rerun_sink.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tensor_codec_nodes.common.pattern import render
from tests.support.dora import run_dataflow, script_node
from tests.support.optional import needs
from tests.support.rerun import read_recording
from tests.support.waiting import wait_until

needs_rerun = needs("rerun")  # rerun-sdk, the optional extra `rerun`


# --------------------------------------------------------------------------- in dora dataflows
def _rerun_cli() -> str | None:
    beside = Path(sys.executable).parent / "rerun"
    return str(beside) if beside.exists() else shutil.which("rerun")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def rerun_server(saved: Path):
    """rerun's own CLI as a headless viewer server on a free port, saving what it receives to
    `saved`; -> its rerun+http:// URL (None where the CLI is not installed)."""
    cli = _rerun_cli()
    if cli is None:
        yield None
        return
    port = _free_port()
    server = subprocess.Popen(
        [cli, "--port", str(port), "--save", str(saved)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, RERUN_ANALYTICS="off"),
        start_new_session=True,
    )

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, timeout=60, describe=f"rerun's server on port {port}", interval=0.1)
        yield f"rerun+http://127.0.0.1:{port}/proxy"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def check_suite_entities(entities: dict) -> None:
    """Every suite payload under /suite/<its case> (a case "suite/tv/mask" on input `suite`:
    /suite/tv/mask), each as what it is."""
    from tensor_codec.testing import make_suite

    assert entities["/suite/tv/boxes_cxcywhr"].archetypes == {"LineStrips2D"}
    assert entities["/suite/tv/boxes_xywh"].archetypes == {"Boxes2D"}
    assert entities["/suite/tv/mask"].archetypes == {"SegmentationImage"}
    assert entities["/suite/tv/video"].rows == 4
    assert entities["/suite/nested/detection/image"].archetypes == {"Image"}
    assert not any(path.startswith("/suite/suite") for path in entities)  # the case names its stream: said once
    cases = {path.split("/")[3] for path in entities if path.startswith("/suite/") and path.count("/") >= 3}
    assert cases >= {name.split("/")[1] for name in make_suite()} - {"empty_dict"}  # {} has nothing to show


@pytest.mark.dora
@needs_rerun
@pytest.mark.filterwarnings("ignore:RRD file has no footer")  # a server's --save streams without one
def test_the_node_in_dora_records_cameras_jpegs_and_the_suite_to_a_file_and_a_viewer(dora_cli, tmp_path):
    """One dataflow: a codec camera, a raw (dora image) camera, their JPEGs and the tensor
    sender's suite (with five hostile messages) into the sink, which writes RRD and streams to
    CONNECT (rerun's own server, headless, saving what it gets) at once."""
    queue = {"queue_size": 64, "queue_policy": "backpressure"}
    ack = {"source": "rerun-sink/ack", "queue_size": 256}
    with rerun_server(tmp_path / "received.rrd") as viewer:
        env = {"RRD": "out/flow.rrd", **({"CONNECT": viewer} if viewer else {})}
        nodes = [
            script_node(
                "camera",
                "tc-camera-source",
                inputs={"ack": ack},
                outputs=["image"],
                env={"FRAMES": 6, "FPS": 0, "WIDTH": 64, "HEIGHT": 56, "DEVICE": "cpu"},
            ),
            script_node(
                "raw-camera",
                "tc-camera-source",
                inputs={"ack": ack},
                outputs=["image"],
                env={"FRAMES": 4, "FPS": 0, "WIDTH": 64, "HEIGHT": 56, "FORMAT": "raw", "DEVICE": "cpu"},
            ),
            script_node(
                "encoder",
                "tc-jpeg-encoder",
                inputs={"frames": {"source": "camera/image", **queue}, "ack_rerun": ack},
                outputs=["jpeg", "ack"],
                env={"DEVICE": "cpu"},
            ),
            script_node(
                "sender",
                "tc-tensor-sender",
                inputs={"ack": ack},
                outputs=["tensors"],
                env={"MODE": "suite", "DEVICE": "cpu", "CORRUPT": 1},
                extra={"shared_memory_pool_size": "64MB"},
            ),
            script_node(
                "rerun-sink",
                "tc-rerun-sink",
                outputs=["ack"],
                env=env,
                inputs={
                    "frames": {"source": "camera/image", **queue},
                    "raw": {"source": "raw-camera/image", **queue},
                    "jpeg": {"source": "encoder/jpeg", **queue},
                    "suite": {"source": "sender/tensors", "queue_size": 256},
                },
            ),
        ]
        run = run_dataflow(dora_cli, tmp_path, nodes, timeout=300)
    assert run.returncode == 0, run.explain()
    with run.explained():
        entities = read_recording(tmp_path / "out" / "flow.rrd")
        assert entities["/frames"].archetypes == {"Image"} and entities["/frames"].rows == 6
        assert entities["/raw"].archetypes == {"Image"} and entities["/raw"].rows == 4
        assert entities["/jpeg"].archetypes == {"EncodedImage"} and entities["/jpeg"].rows == 6
        # the camera's frames on their capture time and frame index; pixels as rendered
        frames = entities["/frames"]
        assert sorted(frames.values("frame")) == list(range(6)) and None not in frames.values("capture_time")
        first = frames.values("frame").index(0)
        assert (
            bytes(frames.values("Image:buffer")[first][0])
            == render(0, 56, 64).permute(1, 2, 0).contiguous().numpy().tobytes()
        )
        check_suite_entities(entities)
        # CORRUPT=1: five hostile messages, which their sender marks expect=reject: counted apart, not errors
        assert "suite: 62 received, 57 shown, 5 refused as expected" in run.output
        assert "rerun-sink: ERROR" not in run.output
        assert "frames: 6 received, 6 shown" in run.output and "jpeg: 6 received, 6 shown" in run.output
        if viewer is None:
            pytest.skip("recorded to a file; rerun's CLI is not installed, so streaming to a viewer was not tested")
        streamed = read_recording(tmp_path / "received.rrd")
        assert {path: e.rows for path, e in streamed.items()} == {path: e.rows for path, e in entities.items()}
