"""tc.stamp and tc.carry: the one way a node author makes a message a receiver can verify and
time, and carries an input's metadata onto what it makes from it."""

from __future__ import annotations

import time

import pytest
import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec.digest import content_digest
from tensor_codec.metadata import CHECKSUM, DESCRIBES_INPUT, SENT_NS
from tensor_codec_nodes.common import protocol as P
from tests.support.fakes import FakeNode

# What tc-camera-source sends with a codec frame (tc.* keys included: what a node receives).
FRAME_METADATA = {
    **tc.encode(torch.zeros(3, 4, 4, dtype=torch.uint8))[1],
    "frame": 7,
    "seq": 7,
    "count": 60,
    "stream": "abc",
    "capture_ns": 123,
    "sent_ns": 456,
    "pixel_format": "rgb8",
    "pattern": "tc-grid-v1",
    "pattern_size": "4x4",
    "wants_ack": True,
    "tx": 3,
    "my_key": "mine",
}


def test_forwarding_a_received_messages_metadata_is_refused_with_the_way_out():
    with pytest.raises(tc.EncodeError, match=r"reserved for the codec, got \['tc\..*tc\.carry\(event\['metadata'\]\)"):
        tc.send(FakeNode(), "boxes", torch.zeros(1), FRAME_METADATA)


def test_a_forwarded_dora_image_key_names_tc_carry_too():
    with pytest.raises(tc.EncodeError, match=r"metadata\.encoding: dora's image key.*tc\.carry"):
        tc.send(FakeNode(), "boxes", torch.zeros(1), {"encoding": "rgb8", "seq": 1})


def test_carry_keeps_what_identifies_a_message_and_drops_what_described_the_input():
    carried = tc.carry(FRAME_METADATA)
    assert carried == {"frame": 7, "seq": 7, "count": 60, "stream": "abc", "capture_ns": 123, "my_key": "mine"}
    node = FakeNode()
    tc.send(node, "boxes", torch.zeros(1), carried)  # what it keeps, tc.send takes
    assert node.sent and FRAME_METADATA["pixel_format"] == "rgb8"  # the input's metadata is not changed
    assert tc.carry(None) == {}
    with pytest.raises(tc.EncodeError, match="metadata: expected a dict .*got list"):
        tc.carry([("seq", 1)])


def test_the_node_protocols_descriptive_keys_are_the_ones_carry_drops():
    """tc.carry's list and the nodes' protocol cannot drift apart: every key the nodes use to
    describe one message's content or one link's delivery is dropped; what names a message is kept."""
    describes = {P.CHECKSUM, P.SENT_NS, *P.IMAGE_KEYS, P.PIXEL_FORMAT, P.PATTERN, P.PATTERN_SIZE, P.LOSSY, P.QUALITY}
    describes |= {P.CHANNELS, P.JPEG_CRC32, P.SUBSAMPLING, P.CASE, P.EXPECT, P.WANTS_ACK, P.TX}
    assert describes == DESCRIBES_INPUT
    assert (P.CHECKSUM, P.SENT_NS) == (CHECKSUM, SENT_NS)  # the nodes' literals are tc.stamp's keys
    assert not {P.SEQ, P.COUNT, P.STREAM, P.FRAME, P.CAPTURE_NS} & DESCRIBES_INPUT


def test_stamp_adds_the_checksum_the_receiver_recomputes_and_the_send_time():
    boxes = tv_tensors.BoundingBoxes(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), format="XYXY", canvas_size=(8, 8))
    obj = {"boxes": boxes, "labels": torch.tensor([3])}
    before = time.time_ns()
    carried = tc.carry(FRAME_METADATA)
    stamped = tc.stamp(obj, carried)
    assert stamped[P.CHECKSUM] == content_digest(obj) and before <= stamped[P.SENT_NS] <= time.time_ns()
    assert P.CHECKSUM not in carried  # a copy: what it was given is not changed
    assert tc.stamp(torch.ones(2))[P.CHECKSUM] == content_digest(torch.ones(2))
    with pytest.raises(tc.EncodeError, match="metadata: expected a dict"):
        tc.stamp(obj, "seq=1")
    with pytest.raises(tc.EncodeError):
        tc.stamp(object())


def test_a_stamp_holds_across_the_wire_whatever_type_gave_the_canvas_size():
    """canvas_size=image.shape[-2:] is a torch.Size; it arrives a tuple. The same size: the same
    checksum (the README's detector failed every box on this)."""
    boxes = tv_tensors.BoundingBoxes(torch.zeros(1, 4), format="XYXY", canvas_size=torch.zeros(3, 48, 64).shape[-2:])
    stamped = tc.stamp(boxes)
    value, metadata = tc.encode(boxes)
    restored = tc.decode(value, metadata)
    assert type(restored.canvas_size) is tuple and content_digest(restored) == stamped[P.CHECKSUM]
