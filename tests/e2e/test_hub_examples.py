"""The dataflows in examples/ that wire this project's nodes to nodes from the dora hub, run as
they are written (copied to a temporary directory; a test changes only what it must: a video file
for the camera and CI=true so that camera ends, a tap that keeps the splitter's JPEGs), and what
they must show:

* dora-camera-opencv -> tc-jpeg-encoder -> tc-jpeg-decoder -> tc-tensor-receiver: the camera's
  frames arrive, none bad, and the JPEGs hold the video's pictures;
* tc-tensor-sender -> dora-echo -> tc-tensor-receiver: every suite message comes through intact;
* tc-camera-source FORMAT=raw -> dora-opencv-image-splitter: the halves are the frame's halves,
  the receiver says why it cannot verify them, and the whole frames through JPEG are good;
* tc-camera-source FORMAT=codec -> the splitter: refused, nothing reaches a node behind it (a
  tensor_codec message carries no `encoding`/`width`/`height`, so no hub node misreads its bytes).

Each test skips, naming the node, where `make install` has not installed its hub node
(examples/hub-nodes.txt): offline without its wheel, for one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from tensor_codec_nodes.common.pattern import read_index, render
from tensor_codec_nodes.common.quality import compare
from tests.support.dora import ROOT, find_script, python_node, run_flow_file
from tests.support.optional import import_or_skip, missing

pytestmark = pytest.mark.dora

EXAMPLES = ROOT / "examples"
# A busy machine runs these slowly; a limit only bounds a hang (the run is explained either way).
RUN_TIMEOUT_S = 300
# A JPEG of the test pattern at quality 90 measures 36-62 dB against its source; corrupt or
# misplaced pixels (a half of the wrong side, a scrambled picture) measure far below.
MIN_PSNR_DB = 30.0
MAX_MAD = 4.0


def hub_node(script: str) -> str:
    """The hub node's console script (beside this interpreter, or on PATH); skip without it or
    without its package (dora-echo's is dora_echo), which the script imports to run."""
    found = find_script(script)
    why = "its console script is not found" if found is None else missing(script.replace("-", "_"))
    if why is not None:
        pytest.skip(f"hub node {script}: {why}: `make install` installs it (examples/hub-nodes.txt)")
    return found


def copy_example(name: str, dest: Path, change=None) -> tuple[Path, dict]:
    """examples/<name> into `dest`, with `change(flow)` applied to its parsed YAML first; ->
    (the copy, the flow as run)."""
    flow = yaml.safe_load((EXAMPLES / name).read_text())
    if change is not None:
        change(flow)
    path = dest / name
    path.write_text(yaml.safe_dump(flow, sort_keys=False))
    return path, flow


def node_of(flow: dict, node_id: str) -> dict:
    found = [n for n in flow["nodes"] if n["id"] == node_id]
    assert len(found) == 1, f"no node {node_id!r} in the example"
    return found[0]


def decode_jpeg_file(path: Path) -> torch.Tensor:
    """A JPEG file as a (3, H, W) uint8 RGB tensor, decoded by TorchCodec (the reference: the
    test skips without it)."""
    return import_or_skip("torchcodec.decoders").decode_jpeg(path, mode="RGB")


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    db, mad = compare(got, want)
    assert db >= MIN_PSNR_DB and mad <= MAX_MAD, (
        f"{what}: {db:.1f} dB, mean abs diff {mad:.2f} (want >= {MIN_PSNR_DB} dB, <= {MAX_MAD})"
    )


def assert_unverified_only(stats: dict, reason: str) -> None:
    assert stats["received"] > 0 and stats["bad"] == 0, stats
    assert stats["good"] == 0 and stats["unverified"] == stats["received"], stats
    assert list(stats["unverified_because"]) and all(reason in why for why in stats["unverified_because"]), stats


# What a test adds to an example to see JPEGs as they travel: a node that writes the first COUNT
# messages of each input to files (<input>-<frame index, or arrival number>.jpg) with their
# metadata (.json). Only dora, pyarrow and numpy: it starts in a fraction of a second, where a
# tc-jpeg-sink imports torch (~3 s of a 2-core machine's time to start and to end).
TAP = """\
import json, os
from pathlib import Path
import numpy as np
from dora import Node

out, count, seen = Path(os.environ["DIR"]), int(os.environ["COUNT"]), {}
out.mkdir(parents=True, exist_ok=True)
for event in Node():
    if event["type"] != "INPUT":
        continue
    n = seen[event["id"]] = seen.get(event["id"], -1) + 1
    if count and n >= count:
        continue
    metadata = event["metadata"]
    name = f"{event['id']}-{metadata.get('frame', n):06d}"
    jpeg = np.asarray(event["value"].to_numpy(zero_copy_only=False), dtype=np.uint8)
    (out / f"{name}.jpg").write_bytes(jpeg.tobytes())
    (out / f"{name}.json").write_text(json.dumps(metadata, default=str))
"""


def tap_node(workdir: Path, inputs: dict[str, str], count: int = 0) -> dict:
    """A TAP node entry writing into `workdir`/out/tap; `inputs`: input id -> source."""
    script = workdir / "tap.py"
    script.write_text(TAP)
    wired = {
        name: {"source": source, "queue_size": 64, "queue_policy": "backpressure"} for name, source in inputs.items()
    }
    return python_node("tap", script, inputs=wired, env={"DIR": "out/tap", "COUNT": count})


# ----------------------------------------------------------------------- dora-camera-opencv
VIDEO_FRAMES = 20


def write_video(path: Path, width: int, height: int) -> list[torch.Tensor]:
    """A short MJPG video of synthetic test frames 0, 1, ...; -> its frames as OpenCV reads them
    back ((3, H, W) RGB: what the camera node sends)."""
    cv2 = pytest.importorskip("cv2")
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 20, (width, height))
    assert writer.isOpened(), "OpenCV cannot write an MJPG video here"
    for index in range(VIDEO_FRAMES):
        writer.write(render(index, height, width).permute(1, 2, 0).numpy()[:, :, ::-1].copy())  # BGR
    writer.release()
    capture, frames = cv2.VideoCapture(str(path)), []
    while True:
        ok, bgr = capture.read()
        if not ok:
            break
        frames.append(torch.from_numpy(bgr[:, :, ::-1].copy()).permute(2, 0, 1))
    capture.release()
    assert len(frames) == VIDEO_FRAMES, f"OpenCV read {len(frames)} of the {VIDEO_FRAMES} frames written"
    return frames


def test_camera_opencv_frames_go_through_jpeg_and_hold_the_video(dora_cli, tmp_path):
    hub_node("dora-camera-opencv")
    example = yaml.safe_load((EXAMPLES / "camera-opencv-to-jpeg.yml").read_text())
    camera_env = node_of(example, "camera")["env"]
    width, height = int(camera_env["IMAGE_WIDTH"]), int(camera_env["IMAGE_HEIGHT"])
    video = tmp_path / "clip.avi"
    frames = write_video(video, width, height)

    kept = 5  # JPEGs the tap writes to files

    def with_video(flow):
        env = node_of(flow, "camera")["env"]
        env["CAPTURE_PATH"] = str(video)  # instead of the webcam
        env["CI"] = "true"  # dora-camera-opencv's own switch: stop after 10 s
        flow["nodes"].append(tap_node(tmp_path, {"jpeg": "jpeg-encoder/jpeg"}, count=kept))

    flow, _ = copy_example("camera-opencv-to-jpeg.yml", tmp_path, with_video)
    run = run_flow_file(dora_cli, flow, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()
    with run.explained():
        inputs = run.report("receiver")["inputs"]
        assert set(inputs) == {"camera", "decoded"}
        # After the video's 20 frames the camera goes on sending "no frame" pictures: frames,
        # none bad, none the receiver could check (nothing says what a real camera saw).
        assert inputs["camera"]["received"] >= VIDEO_FRAMES and inputs["decoded"]["received"] >= VIDEO_FRAMES, inputs
        for name in ("camera", "decoded"):
            assert_unverified_only(inputs[name], "a real camera's frame")

        # The first JPEGs are the video's first frames: each carries its index (the test
        # pattern's strip) and matches that frame of the video within JPEG's bounds.
        saved = sorted((flow.parent / "out" / "tap").glob("jpeg-*.jpg"))
        assert len(saved) == kept, saved
        indices = []
        for path in saved:
            picture = decode_jpeg_file(path)
            assert picture.shape == (3, height, width), (path.name, picture.shape)
            index = read_index(picture)
            assert index is not None and index < VIDEO_FRAMES, f"{path.name}: not a frame of the video (index {index})"
            assert_close(picture, frames[index], f"{path.name} against video frame {index}")
            assert_close(picture, render(index, height, width), f"{path.name} against the frame written")
            indices.append(index)
        assert indices == sorted(set(indices)), f"frames out of order or repeated: {indices}"


# --------------------------------------------------------------------------------- dora-echo
def test_echo_passes_every_suite_message_through_intact(dora_cli, tmp_path):
    from tensor_codec.testing import make_suite

    hub_node("dora-echo")
    flow, _ = copy_example("echo-passthrough.yml", tmp_path)
    run = run_flow_file(dora_cli, flow, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()
    with run.explained():
        report = run.report("receiver")
        stats = report["inputs"]["tensors"]
        assert report["ok"] and set(report["inputs"]) == {"tensors"}
        assert stats["good"] == stats["received"] == stats["expected"] == len(make_suite()), stats
        assert (stats["bad"], stats["missing"], stats["unverified"]) == (0, 0, 0), stats


# ----------------------------------------------------------------- dora-opencv-image-splitter
def test_splitter_halves_of_raw_frames(dora_cli, tmp_path):
    hub_node("dora-opencv-image-splitter")
    tap = tap_node(tmp_path, {"left": "splitter/image_0", "right": "splitter/image_1"})
    flow, ran = copy_example("splitter-raw.yml", tmp_path, lambda flow: flow["nodes"].append(tap))
    camera_env = node_of(ran, "camera")["env"]
    assert camera_env["FORMAT"] == "raw"
    width, height, count = int(camera_env["WIDTH"]), int(camera_env["HEIGHT"]), int(camera_env["FRAMES"])
    half = width // 2
    run = run_flow_file(dora_cli, flow, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()
    with run.explained():
        inputs = run.report("receiver")["inputs"]
        assert set(inputs) == {"frames", "whole", "left", "right"}
        for name, stats in inputs.items():
            assert stats["received"] == stats["expected"] == count and (stats["bad"], stats["missing"]) == (0, 0), (
                name,
                stats,
            )
        # The raw frames byte for byte, and the same frames through tc-jpeg-encoder/decoder within
        # JPEG's bounds: verified.
        assert inputs["frames"]["good"] == count and inputs["whole"]["good"] == count, inputs
        # A half carries the whole frame's metadata (pattern_size WxH): the receiver says so
        # rather than calling it good or bad.
        for side in ("left", "right"):
            assert_unverified_only(
                inputs[side],
                f"frame is {half}x{height}, its pattern was rendered at {width}x{height}: cropped or resized upstream?",
            )

        # The halves themselves, as the splitter sent them: JPEGs of the left and right halves
        # of the pattern each frame carries, described as such.
        halves = flow.parent / "out" / "tap"
        for side, columns in (("left", slice(0, half)), ("right", slice(half, 2 * half))):
            saved = sorted(halves.glob(f"{side}-*.jpg"))
            assert [p.name for p in saved] == [f"{side}-{i:06d}.jpg" for i in range(count)]
            for index, path in enumerate(saved):
                metadata = json.loads(path.with_suffix(".json").read_text())
                assert (metadata["encoding"], metadata["width"], metadata["height"]) == ("jpeg", half, height), metadata
                picture = decode_jpeg_file(path)
                assert picture.shape == (3, height, half), (path.name, picture.shape)
                assert_close(
                    picture,
                    render(index, height, width)[:, :, columns],
                    f"{path.name} against the {side} half of frame {index}",
                )


def test_splitter_refuses_codec_frames(dora_cli, tmp_path):
    """The project's camera with its default FORMAT=codec sends tensor_codec messages, which say
    `pixel_format`, not dora's `encoding`/`width`/`height`: the splitter (the example's own node
    entry) skips every one, and nothing reaches the receiver behind it. (With those keys, it
    would take a tensor_codec message's bytes for the pixels they name.)"""
    hub_node("dora-opencv-image-splitter")
    example = yaml.safe_load((EXAMPLES / "splitter-raw.yml").read_text())
    camera, splitter = node_of(example, "camera"), node_of(example, "splitter")
    camera["env"].pop("FORMAT")  # the default: codec
    count = int(camera["env"]["FRAMES"])
    receiver = {
        "id": "receiver",
        "path": "tc-tensor-receiver",
        "inputs": {
            "frames": {"source": "camera/image", "queue_size": 64, "queue_policy": "backpressure"},
            "left": {"source": "splitter/image_0", "queue_size": 64, "queue_policy": "backpressure"},
            "right": {"source": "splitter/image_1", "queue_size": 64, "queue_policy": "backpressure"},
        },
        # STRICT=0: left and right must get nothing, which a strict receiver (the default) fails
        "env": {"DEVICE": "cpu", "REPORT": "report.json", "STRICT": "0"},
    }
    flow = tmp_path / "codec-into-splitter.yml"
    flow.write_text(yaml.safe_dump({"nodes": [camera, splitter, receiver]}, sort_keys=False))
    run = run_flow_file(dora_cli, flow, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.explain()
    with run.explained():
        inputs = run.report("receiver")["inputs"]
        assert inputs["frames"]["good"] == count, inputs["frames"]  # the camera did send its frames
        assert inputs["left"]["received"] == 0 and inputs["right"]["received"] == 0, inputs
        said = "Unsupported image encoding: None"  # printed by the splitter, in its log and dora's output
        log = run.node_logs().get("splitter")
        refusals = max(run.output.count(said), log.read_text(errors="replace").count(said) if log else 0)
        assert refusals >= count, (
            f"the splitter said 'Unsupported image encoding: None' {refusals} times for {count} frames"
        )
