"""tc-rerun-sink: each thing shown as what it is, read back from the recording with rerun's own
API (rerun.chunk.RrdReader): entities, archetypes, counts, pixels, and a box's corners where its
format says; bad input logged, counted and skipped (the node in real dora dataflows, writing a
file and streaming to a viewer: tests/e2e/test_rerun_sink_e2e.py). rerun-sdk is an optional extra: without it
these tests skip, except those of the node's words when it is missing."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from torchvision import tv_tensors as tvt

import tensor_codec as tc
from tensor_codec_nodes.common.pattern import render
from tensor_codec_nodes.common.settings import SettingError
from tensor_codec_nodes.rerun_sink import sdk
from tensor_codec_nodes.rerun_sink.config import load_config
from tests.support.jpeg import reference_encode
from tests.support.optional import needs
from tests.support.paths import ROOT
from tests.support.rerun import read_recording

needs_rerun = needs("rerun")  # rerun-sdk, the optional extra `rerun`
CAPTURE_NS = 1_763_900_000_123_456_789


def record(tmp_path: Path, messages, split_by="case"):
    """Show (input id, value, metadata) messages with a RerunSink writing an .rrd; -> (sink,
    the recording's entities)."""
    from tensor_codec_nodes.rerun_sink.sink import RerunSink

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "test.rrd"
    sink = RerunSink(sdk.open_recording("tc-test", str(path), None), split_by)
    for input_id, value, metadata in messages:
        sink.handle(input_id, value, metadata)
    assert sink.close() is None
    return sink, read_recording(path)


def encoded(obj, **extra):
    value, metadata = tc.encode(obj)
    metadata.update(extra)
    return value, metadata


def corners_of(entities, path):
    """Each box's (x1, y1, x2, y2) as Boxes2D recorded it (centers +- half sizes), last row."""
    entity = entities[path]
    centers = np.array(entity.values("Boxes2D:centers")[-1])
    half = np.array(entity.values("Boxes2D:half_sizes")[-1])
    return np.concatenate([centers - half, centers + half], axis=1)


# ------------------------------------------------------------------------------------- settings
def test_settings_need_a_file_or_a_viewer_and_name_what_is_wrong():
    config = load_config({})
    assert (config.file, config.viewer, config.split_key) == ("out/recording.rrd", None, "case")
    assert load_config({"CONNECT": "auto", "RRD": "none"}).viewer == "rerun+http://127.0.0.1:9876/proxy"
    assert load_config({"SPLIT_BY": "none"}).split_key is None
    with pytest.raises(SettingError, match=r"RRD and CONNECT: expected a file .* got RRD=none and no CONNECT"):
        load_config({"RRD": "none"})
    with pytest.raises(
        SettingError, match=r"CONNECT: expected auto or a rerun\+http://host:port/proxy URL, got 'localhost:9876'"
    ):
        load_config({"CONNECT": "localhost:9876"})


@pytest.mark.slow  # a fresh interpreter
def test_without_rerun_sdk_the_node_says_how_to_install_it_and_exits_2(tmp_path):
    fake = tmp_path / "rerun"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'rerun' (hidden by the test)\")\n")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]), DORA_NODE_CONFIG="{}"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tensor_codec_nodes.rerun_sink.main"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "rerun-sdk is not installed" in proc.stderr and "pip install 'rerun-sdk>=0.41'" in proc.stderr
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------------- TVTensors
@needs_rerun
def test_images_are_hwc_images_with_their_pixels_and_channels_last_is_viewed_not_copied(tmp_path):
    from tensor_codec_nodes.rerun_sink import views

    planar = tvt.Image(torch.randint(0, 256, (3, 6, 8), dtype=torch.uint8))
    channels_last = tvt.Image(
        torch.randint(0, 256, (1, 3, 5, 7), dtype=torch.uint8).to(memory_format=torch.channels_last)
    )
    grey = tvt.Image(torch.randint(0, 256, (1, 4, 5), dtype=torch.uint8))
    _, entities = record(
        tmp_path,
        [
            ("planar", *encoded(planar)),
            ("cl", *encoded(channels_last)),
            ("grey", *encoded(grey)),
        ],
    )
    for path, source, model in (("/planar", planar, 2), ("/cl", channels_last[0], 2), ("/grey", grey, 1)):
        entity = entities[path]
        assert entity.archetypes == {"Image"} and entity.rows == 1
        fmt = entity.values("Image:format")[-1][0]
        assert (fmt["width"], fmt["height"], fmt["color_model"]) == (source.shape[-1], source.shape[-2], model)
        assert bytes(entity.values("Image:buffer")[-1][0]) == source.permute(1, 2, 0).contiguous().numpy().tobytes()
    # The HWC array handed to rerun views the tensor's memory when it is channels-last.
    chw = channels_last[0].as_subclass(torch.Tensor)
    image = views._image(chw, "$", None)
    assert image is not None
    hwc = views._numpy(chw.permute(1, 2, 0), "$")
    assert np.shares_memory(hwc, chw.numpy()) and hwc.flags["C_CONTIGUOUS"]


@needs_rerun
def test_a_video_is_its_frames_on_the_video_frame_timeline(tmp_path):
    video = tvt.Video(torch.randint(0, 256, (4, 3, 6, 6), dtype=torch.uint8))
    _, entities = record(tmp_path, [("cam", *encoded({"clip": video, "score": 0.5}, capture_ns=CAPTURE_NS))])
    clip = entities["/cam/clip"]
    assert clip.archetypes == {"Image"} and clip.rows == 4
    assert sorted(clip.values("video_frame")) == [0, 1, 2, 3]
    frames = dict(zip(clip.values("video_frame"), clip.values("Image:buffer")))
    assert bytes(frames[2][0]) == video[2].permute(1, 2, 0).contiguous().numpy().tobytes()
    score = entities["/cam/score"]
    assert score.values("Scalars:scalars") == [[0.5]]
    assert "video_frame" not in score.columns  # the next leaf is not a video frame


@needs_rerun
def test_masks_are_segmentation_images(tmp_path):
    labels = tvt.Mask(torch.tensor([[0, 1, 2], [3, 0, 7]], dtype=torch.int64))
    instances = tvt.Mask(torch.zeros(3, 2, 3, dtype=torch.bool))
    instances[0, 0, 0] = instances[1, 0, 1] = instances[2, 1, 2] = True
    instances[1, 1, 2] = True  # covered by masks 1 and 2: the last one's id
    soft = tvt.Mask(torch.rand(2, 3))
    _, entities = record(tmp_path, [("m", *encoded({"labels": labels, "instances": instances, "soft": soft}))])
    seg = entities["/m/labels"]
    assert seg.archetypes == {"SegmentationImage"}
    assert np.frombuffer(bytes(seg.values("SegmentationImage:buffer")[-1][0]), np.int64).tolist() == [0, 1, 2, 3, 0, 7]
    ids = np.frombuffer(bytes(entities["/m/instances"].values("SegmentationImage:buffer")[-1][0]), np.uint8)
    assert ids.tolist() == [1, 2, 0, 0, 0, 3]
    assert entities["/m/soft"].archetypes == {"Image"}  # probabilities: grey levels, not ids


BOX_CASES = [
    # format, the box as that format writes it, its corners (x, y) clockwise from the first
    ("XYXY", [10, 20, 40, 60], [(10, 20), (40, 20), (40, 60), (10, 60)]),
    ("XYWH", [10, 20, 30, 40], [(10, 20), (40, 20), (40, 60), (10, 60)]),
    ("CXCYWH", [25, 40, 30, 40], [(10, 20), (40, 20), (40, 60), (10, 60)]),
    # rotated: angle in degrees counter-clockwise; (x1, y1) is the first corner
    ("XYWHR", [10, 20, 30, 40, 0], [(10, 20), (40, 20), (40, 60), (10, 60)]),
    ("XYWHR", [10, 20, 30, 40, 90], [(10, 20), (10, -10), (50, -10), (50, 20)]),
    ("CXCYWHR", [50, 50, 20, 10, 90], [(45, 60), (45, 40), (55, 40), (55, 60)]),
    ("XYXYXYXY", [0, 0, 8, 4, 6, 8, -2, 4], [(0, 0), (8, 4), (6, 8), (-2, 4)]),
]


@needs_rerun
@pytest.mark.parametrize("box_format, box, corners", BOX_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(BOX_CASES)])
def test_a_box_is_drawn_where_its_format_says_on_its_canvas(tmp_path, box_format, box, corners):
    boxes = tvt.BoundingBoxes(torch.tensor([box], dtype=torch.float32), format=box_format, canvas_size=(90, 120))
    _, entities = record(tmp_path, [("det", *encoded({"boxes": [boxes]}))])
    shown = entities["/det/boxes/[0]"] if "/det/boxes/[0]" in entities else entities[r"/det/boxes/\[0\]"]
    expected = np.array(corners, dtype=np.float64)
    if box_format in ("XYXY", "XYWH", "CXCYWH"):
        assert shown.archetypes == {"Boxes2D"}
        ((x1, y1, x2, y2),) = corners_of(entities, shown.path)
        np.testing.assert_allclose([x1, y1, x2, y2], [*expected.min(axis=0), *expected.max(axis=0)], atol=1e-4)
    else:  # rerun's boxes are axis-aligned: a rotated one is its closed outline
        assert shown.archetypes == {"LineStrips2D"}
        strip = np.array(shown.values("LineStrips2D:strips")[-1][0])
        assert strip.shape == (5, 2)
        np.testing.assert_allclose(strip[:4], expected, atol=1e-4)
        np.testing.assert_allclose(strip[4], strip[0])
    canvas = np.array(entities[shown.path + "/canvas"].values("LineStrips2D:strips")[-1][0])
    assert canvas.max(axis=0).tolist() == [120, 90]  # width along x, height along y


@needs_rerun
def test_key_points_are_points_with_one_class_per_instance(tmp_path):
    if not hasattr(tvt, "KeyPoints"):
        pytest.skip("this torchvision has no KeyPoints")
    points = tvt.KeyPoints(torch.arange(12, dtype=torch.float32).view(2, 3, 2), canvas_size=(20, 30))
    _, entities = record(tmp_path, [("kp", *encoded(points))])
    shown = entities["/kp"]
    assert shown.archetypes == {"Points2D"}
    assert shown.values("Points2D:positions")[-1] == points.view(-1, 2).tolist()
    assert shown.values("Points2D:class_ids")[-1] == [0, 0, 0, 1, 1, 1]
    assert np.array(entities["/kp/canvas"].values("LineStrips2D:strips")[-1][0]).max(axis=0).tolist() == [30, 20]


@needs_rerun
def test_nested_structures_follow_their_paths_and_other_things_show_as_what_they_are(tmp_path):
    obj = {
        "image": tvt.Image(torch.zeros(3, 4, 5, dtype=torch.uint8)),
        "boxes": [
            tvt.BoundingBoxes(torch.tensor([[1.0, 1, 2, 2]]), format="XYXY", canvas_size=(4, 5)) for _ in range(3)
        ],
        "features": torch.randn(2, 3, 4),
        "loss": torch.tensor(0.25),
        "name": "front",
        "nothing": None,
        "packed": torch.nn.utils.rnn.pack_sequence([torch.arange(3.0), torch.arange(2.0)]),
        "empty": torch.zeros(0, 4),
        "complex": torch.tensor([1 + 2j, 3 - 1j]),
    }
    sink, entities = record(tmp_path, [("det", *encoded(obj, capture_ns=CAPTURE_NS, frame=7, case="a/b"))])
    assert sink.shown["det"] == 1 and not sink.bad and not sink.partial
    root = "/det/a/b"  # SPLIT_BY=case: the message names itself
    kinds = {path.removeprefix(root): entity.archetypes for path, entity in entities.items()}
    assert kinds == {
        "/image": {"Image"},
        r"/boxes/\[0\]": {"Boxes2D"},
        r"/boxes/\[1\]": {"Boxes2D"},
        r"/boxes/\[2\]": {"Boxes2D"},
        r"/boxes/\[0\]/canvas": {"LineStrips2D"},
        r"/boxes/\[1\]/canvas": {"LineStrips2D"},
        r"/boxes/\[2\]/canvas": {"LineStrips2D"},
        "/features": {"Tensor"},
        "/loss": {"Scalars"},
        "/name": {"TextDocument"},
        "/packed/data": {"Tensor"},
        "/packed/batch_sizes": {"Tensor"},  # sorted: no indices (None)
        "/empty": {"TextDocument"},
        "/complex": {"Tensor"},
    }
    loss = entities[root + "/loss"]
    assert loss.values("Scalars:scalars") == [[0.25]]
    # Time from the message: capture_ns on capture_time, frame on frame; rerun's log_time besides.
    assert loss.values("capture_time") == [CAPTURE_NS] and loss.values("frame") == [7]


@needs_rerun
def test_a_stream_that_names_its_messages_is_split_unless_told_not_to(tmp_path):
    messages = [("s", *encoded(torch.tensor(float(i)), case=f"c{i % 2}")) for i in range(4)]
    _, split = record(tmp_path / "a", messages)
    assert {p: e.rows for p, e in split.items()} == {"/s/c0": 2, "/s/c1": 2}
    _, together = record(tmp_path / "b", messages, split_by=None)
    assert {p: e.rows for p, e in together.items()} == {"/s": 4}


@needs_rerun
def test_a_case_that_starts_with_its_input_id_is_not_split_under_it_twice(tmp_path):
    messages = [
        ("suite", *encoded(torch.tensor(1.0), case="suite/dtype/float32")),
        ("s", *encoded(torch.ones(1), case="s")),
    ]
    _, entities = record(tmp_path, messages)
    assert set(entities) == {"/suite/dtype/float32", "/s/s"}  # a one-part case is the whole name: kept


@needs_rerun
def test_messages_their_sender_expects_refused_are_counted_apart_and_not_logged_as_errors(tmp_path, caplog):
    value, metadata = encoded(torch.arange(4.0), case="corrupt/truncated", expect="reject")
    truncated = value.slice(0, len(value) - 1)
    _, good = encoded(torch.ones(2))
    with caplog.at_level(logging.INFO, logger="rerun-sink"):
        sink, _ = record(
            tmp_path,
            [("suite", truncated, metadata), ("suite", value.slice(0, len(value) - 1), {**metadata, "expect": None})],
        )
    assert (sink.refused["suite"], sink.bad["suite"], sink.shown["suite"]) == (1, 1, 0)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and "not shown" in errors[0]  # only the one nobody expected
    assert sink.summary() == "suite: 2 received, 0 shown, 1 refused as expected, 1 bad"


# ------------------------------------------------------------------------- JPEGs, plain images
@needs_rerun
def test_jpegs_are_recorded_as_they_came_and_plain_images_without_a_copy(tmp_path):
    jpeg = reference_encode(render(3, 56, 64))
    jpeg_bytes = pa.array(jpeg.numpy(), pa.uint8())
    hwc = torch.randint(0, 256, (6, 8, 3), dtype=torch.uint8)
    flat = pa.array(hwc.numpy().ravel(), pa.uint8())
    grey = pa.array(torch.randint(0, 256, (48,), dtype=torch.uint8).numpy(), pa.uint8())
    sink, entities = record(
        tmp_path,
        [
            ("jpeg", jpeg_bytes, {"encoding": "jpeg", "width": 64, "height": 56}),
            ("bare", jpeg_bytes, {}),
            ("rgb", flat, {"encoding": "rgb8", "width": 8, "height": 6}),
            ("bgr", flat, {"encoding": "bgr8", "width": 8, "height": 6}),
            ("mono", grey, {"encoding": "mono8", "width": 8, "height": 6}),
        ],
    )
    assert sum(sink.shown.values()) == 5 and not sink.bad
    for path in ("/jpeg", "/bare"):
        assert entities[path].archetypes == {"EncodedImage"}
        assert bytes(entities[path].values("EncodedImage:blob")[-1][0]) == jpeg.numpy().tobytes()  # not decoded
        assert entities[path].values("EncodedImage:media_type")[-1] == ["image/jpeg"]
    models = {path: entities[path].values("Image:format")[-1][0]["color_model"] for path in ("/rgb", "/bgr", "/mono")}
    assert models == {"/rgb": 2, "/bgr": 4, "/mono": 1}  # rerun's RGB, BGR, L
    assert bytes(entities["/rgb"].values("Image:buffer")[-1][0]) == hwc.numpy().tobytes()


# --------------------------------------------------------------------------------- bad input
@needs_rerun
def test_bad_messages_are_logged_counted_and_skipped_and_the_next_is_shown(tmp_path, caplog):
    good_value, good_metadata = encoded(torch.arange(3.0))
    bad_header = dict(good_metadata, **{"tc.header": good_metadata["tc.header"][:-5]})
    not_jpeg = pa.array(np.frombuffer(b"\xff\xd8\xff\xe0garbage", np.uint8), pa.uint8())
    wrong_size = pa.array(np.zeros(10, np.uint8), pa.uint8())
    box_shape = dict(good_metadata)
    messages = [
        ("in", good_value, bad_header),  # header cut short
        ("in", pa.array([1, 2, 3], pa.int64()), {"tc.header": "{"}),  # not a message
        ("in", pa.array(np.zeros(4, np.uint8), pa.uint8()), {"something": 1}),  # not a known kind
        ("in", not_jpeg, {"encoding": "jpeg"}),  # markers wrong
        ("in", wrong_size, {"encoding": "rgb8", "width": 4, "height": 4}),  # 10 of 48 bytes
        ("in", wrong_size, {"encoding": "yuv420", "width": 4, "height": 4}),  # unknown encoding
        ("in", wrong_size, {"encoding": "mono8", "width": -2, "height": 5}),  # bad width
        ("in", None, {}),  # no value at all
        ("in", good_value, dict(good_metadata, capture_ns="yesterday")),  # shown, time not used
        ("in", *encoded(tvt.Mask(torch.tensor([[-1, 2]])))),  # class ids < 0
        ("in", good_value, dict(box_shape)),  # fine
    ]
    with caplog.at_level("ERROR", logger="rerun-sink"):
        sink, entities = record(tmp_path, messages)
    assert sink.received["in"] == 11
    assert sink.bad["in"] == 8 and sink.partial["in"] == 2 and sink.shown["in"] == 1
    text = caplog.text
    for words in (
        "tc.header",
        "expected a tensor_codec message",
        "metadata.encoding: expected one of jpeg",
        "expected 4x4x3 = 48 bytes for rgb8, got 10",
        "metadata.width: expected a positive integer, got -2",
        "metadata.capture_ns: expected nanoseconds since the epoch",
        "expected class ids >= 0, got -1",
    ):
        assert words in text, words
    assert entities["/in"].rows == 2  # the one with a bad time (at its log time) and the last good one
    assert "in: 11 received, 1 shown, 2 partly, 8 bad" == sink.summary()


@needs_rerun
def test_bad_box_and_point_shapes_name_the_leaf(tmp_path):
    from tensor_codec_nodes.rerun_sink.views import CannotShow, box_views, keypoint_views

    with pytest.raises(
        CannotShow, match=r"\$\.boxes: expected boxes of shape \(N, 5\) in format CXCYWHR, got \(1, 4\)"
    ):
        box_views(torch.zeros(1, 4), "CXCYWHR", (10, 10), "$.boxes")
    with pytest.raises(CannotShow, match=r"\$\.kp: expected key points of shape \(\.\.\., 2\), got \(4, 3\)"):
        keypoint_views(torch.zeros(4, 3), (10, 10), "$.kp")


@pytest.mark.gpu
@needs_rerun
def test_cuda_tensors_are_shown_from_a_host_copy(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    image = tvt.Image(torch.randint(0, 256, (3, 4, 5), dtype=torch.uint8))
    from tensor_codec_nodes.rerun_sink.views import views

    found, problems = views(
        {
            "image": tvt.Image(image.cuda()),
            "boxes": tvt.BoundingBoxes(torch.ones(1, 4).cuda(), format="XYWH", canvas_size=(4, 5)),
        }
    )
    assert not problems and len(found) == 3


def test_the_default_pipeline_wires_the_sink_to_take_what_it_shows(tmp_path):
    import yaml

    flow = yaml.safe_load((ROOT / "dataflow.yml").read_text())
    nodes = {n["id"]: n for n in flow["nodes"]}
    sink = nodes["rerun-sink"]
    assert (
        sink["path"] == "tc-rerun-sink" and sink["env"]["RRD"] == "out/pipeline.rrd" and sink["env"]["REQUIRED"] == "0"
    )
    assert {i: (v["source"] if isinstance(v, dict) else v) for i, v in sink["inputs"].items()} == {
        "jpeg": "jpeg-encoder/jpeg",
        "suite": "suite-sender/tensors",
    }
    # acknowledged: each producer it takes from waits for its acks too
    assert nodes["jpeg-encoder"]["inputs"]["ack_rerun"]["source"] == "rerun-sink/ack"
    assert nodes["suite-sender"]["inputs"]["ack_rerun"]["source"] == "rerun-sink/ack"


def test_without_rerun_sdk_a_taken_message_is_still_released_and_a_bad_one_logged(caplog):
    """REQUIRED=0 without the SDK: each tensor_codec message is decoded and released (a CUDA IPC
    producer waits for every consumer's release), a bad one logged, nothing raised."""
    from tensor_codec_nodes.rerun_sink import node

    log = logging.getLogger("rerun-sink-test")
    value, metadata = tc.encode({"x": torch.arange(4)})

    def taken(metadata):
        return node._release_unshown({"type": "INPUT", "id": "in", "value": value, "metadata": metadata}, metadata, log)

    assert taken(metadata) == 0
    broken = dict(metadata, **{"tc.header": "{"})
    with caplog.at_level("INFO", logger=log.name):
        assert taken(broken) == 0
        assert "input in: a bad message taken: tc.header" in caplog.text
        caplog.clear()
        # one its sender marked expect=reject (the suite's corrupted messages): counted, no ERROR line
        assert taken(dict(broken, expect="reject")) == 1 and not caplog.records
