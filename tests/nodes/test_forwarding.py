"""A node of one's own between the camera and the receiver (README's detector): forwarding the
frame's metadata onto the boxes fails, and says why; tc.carry + tc.stamp make the boxes good."""

from __future__ import annotations

import time

import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.pattern import PATTERN_NAME
from tensor_codec_nodes.tensor_receiver.receiver import Receiver

FRAME = {
    P.FRAME: 4,
    P.SEQ: 4,
    P.COUNT: 0,
    P.STREAM: "camera",
    P.CAPTURE_NS: time.time_ns(),
    P.PIXEL_FORMAT: "rgb8",
    P.PATTERN: PATTERN_NAME,
    P.PATTERN_SIZE: "64x48",
}


def boxes():
    box = tv_tensors.BoundingBoxes(torch.tensor([[10.0, 20.0, 50.0, 40.0]]), format="XYXY", canvas_size=(48, 64))
    return {"boxes": box, "labels": torch.tensor([3])}


def received(obj, metadata):
    value, codec = tc.encode(obj)
    receiver = Receiver(torch.device("cpu"))
    verdict = receiver.handle({"type": "INPUT", "id": "boxes", "value": value, "metadata": {**metadata, **codec}})
    return verdict, receiver.report()["inputs"]["boxes"]


def test_a_frames_forwarded_keys_on_boxes_fail_and_the_failure_says_they_were_forwarded():
    verdict, report = received(boxes(), FRAME)
    assert verdict == "bad"
    failure = report["failures"][0]
    assert "type: expected torchvision.tv_tensors.Image, got builtins.dict: metadata pixel_format='rgb8'" in failure
    assert "forwarded its input's metadata" in failure and "tc.carry(metadata)" in failure


def test_a_forwarded_checksum_fails_naming_the_cure():
    verdict, report = received(boxes(), {**tc.carry(FRAME), P.CHECKSUM: tc.stamp(torch.zeros(1))[P.CHECKSUM]})
    assert verdict == "bad" and "checksum: expected crc32:" in report["failures"][0]
    assert "tc.stamp(obj, metadata)" in report["failures"][0]


def test_carried_and_stamped_boxes_are_good_and_timed():
    obj = boxes()
    verdict, report = received(obj, tc.stamp(obj, tc.carry(FRAME)))
    assert verdict == "good" and report["good"] == 1 and report["latency_ms"]["p50"] is not None
