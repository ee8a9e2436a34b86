"""Nested structures, scalars, namedtuples, PackedSequences, and encode-side errors."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import PackedSequence, pack_sequence, pad_packed_sequence

import tensor_codec as tc
from tensor_codec.testing import assert_identical, make_detection_sample, make_packed_sequences


def round_trip(obj, **kwargs):
    return tc.decode(*tc.encode(obj), **kwargs)


@pytest.mark.parametrize(
    "obj",
    [
        None,
        True,
        False,
        0,
        -(2**63),
        2**63 - 1,
        1.5,
        -0.0,
        "",
        "text ünïcode ✓",
        [],
        (),
        {},
        [1, [2, (3, None)]],
        {"a": {"b": {"c": [1.0, "x"]}}},
        {1: "int key", "s": 2},
        (torch.zeros(2), "tag", 3),
    ],
    ids=repr,
)
def test_plain_values_and_containers_round_trip(obj):
    assert_identical(round_trip(obj), obj)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_round_trip(value):
    out = round_trip([value])
    assert_identical(out, [value])


def test_bool_and_int_stay_distinct():
    out = round_trip([True, 1, 0, False])
    assert [type(v) for v in out] == [bool, int, int, bool]


def test_detection_sample_round_trips_with_every_part_intact():
    sample = make_detection_sample()
    assert_identical(round_trip(sample), sample)
    assert_identical(round_trip(sample, copy=True), sample)


@pytest.mark.parametrize("name", sorted(make_packed_sequences()))
def test_packed_sequences_round_trip_as_one_unit(name):
    packed = make_packed_sequences()[name]
    restored = round_trip(packed)
    assert type(restored) is PackedSequence
    assert_identical(restored, packed)
    padded, lengths = pad_packed_sequence(restored, batch_first=True)
    expected, expected_lengths = pad_packed_sequence(packed, batch_first=True)
    assert torch.equal(padded, expected) and torch.equal(lengths, expected_lengths)


def test_packed_sequence_inside_a_structure():
    packed = pack_sequence([torch.ones(3, 2), torch.zeros(1, 2)])
    obj = {"seq": packed, "ids": [7, 8]}
    assert_identical(round_trip(obj), obj)


Pose = collections.namedtuple("Pose", ["position", "angle"])


def test_unregistered_namedtuple_comes_back_equal_with_same_name_and_fields():
    obj = Pose(torch.tensor([1.0, 2.0]), 0.5)
    out = round_trip(obj)
    assert type(out).__name__ == "Pose" and out._fields == ("position", "angle")
    assert torch.equal(out.position, obj.position) and out.angle == 0.5


def test_registered_namedtuple_comes_back_as_its_class():
    @tc.register_namedtuple
    class Grasp(collections.namedtuple("Grasp", ["width", "score"])):
        pass

    out = round_trip([Grasp(0.08, 0.9)])
    assert type(out[0]) is Grasp and out[0] == Grasp(0.08, 0.9)


@pytest.mark.parametrize(
    "obj, path, found",
    [
        ({"boxes": [torch.zeros(1), torch.zeros(1), np.zeros(3)]}, "$.boxes[2]", "numpy.ndarray"),
        ({"meta": {"when": object()}}, "$.meta.when", "builtins.object"),
        ([{1.5: "float key"}], "$[0]", "float"),
        ({"p": torch.nn.Parameter(torch.zeros(2))}, "$.p", "Parameter"),
        ({"x": np.float32(1.0)}, "$.x", "numpy.float32"),
        ({"s": {1, 2}}, "$.s", "builtins.set"),
        ({"big": 2**64}, "$.big", "int64"),
        ({"odd key": b"bytes"}, "$['odd key']", "builtins.bytes"),
    ],
)
def test_unsupported_input_names_its_path_and_type(obj, path, found):
    with pytest.raises(tc.EncodeError, match=None) as info:
        tc.encode(obj)
    message = str(info.value)
    assert f"`{path}`" in message and found in message
    assert isinstance(info.value, TypeError) and isinstance(info.value, tc.CodecError)


@pytest.mark.parametrize(
    "tensor, what",
    [
        (torch.zeros(2, 2).to_sparse(), "sparse"),
        (torch.quantize_per_tensor(torch.zeros(3), 0.1, 0, torch.qint8), "quantized"),
        (torch.zeros(3, device="meta"), "meta"),
    ],
)
def test_unsupported_tensors_are_refused_with_their_kind(tensor, what):
    with pytest.raises(tc.EncodeError, match=what):
        tc.encode({"t": tensor})
    with pytest.raises(tc.EncodeError, match=what):  # at the top level too
        tc.encode(tensor)


def test_repeated_single_tensor_messages_reuse_the_plan_but_never_the_data():
    first = torch.arange(12.0).reshape(3, 4).t()
    second = torch.arange(100.0, 112.0).reshape(3, 4).t()
    v1, m1 = tc.encode(first)
    v2, m2 = tc.encode(second)
    assert m1 == m2  # same layout, same header
    m1["mine"] = 1  # the returned metadata is the caller's to change
    assert "mine" not in tc.encode(first)[1]
    assert torch.equal(tc.decode(v1, m1), first) and torch.equal(tc.decode(v2, m2), second)


def test_same_shape_with_other_attributes_gets_its_own_header():
    from torchvision import tv_tensors as tvt

    a = tvt.BoundingBoxes(torch.zeros(2, 4), format="XYXY", canvas_size=(10, 10))
    b = tvt.BoundingBoxes(torch.zeros(2, 4), format="XYXY", canvas_size=(20, 10))
    c = tvt.BoundingBoxes(torch.zeros(2, 4), format="XYWH", canvas_size=(10, 10))
    outs = [tc.decode(*tc.encode(x)) for x in (a, b, c, a)]
    assert [(o.format.name, o.canvas_size) for o in outs] == [
        ("XYXY", (10, 10)),
        ("XYXY", (20, 10)),
        ("XYWH", (10, 10)),
        ("XYXY", (10, 10)),
    ]


def test_a_stream_of_new_attributes_writes_and_validates_its_leaf_table_once(monkeypatch):
    """A new canvas size every frame makes a new header every message, with the same leaf table:
    the sender writes that table's text once, the receiver parses and validates it once, and
    every message still restores its own attributes (structural: counted, not timed)."""
    from torchvision import tv_tensors as tvt

    from tensor_codec import plan, received
    from tensor_codec.transports import host
    from tensor_codec.wire import header as wire

    counts = collections.Counter()

    def counted(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(host, "leaf_table", counted("written", wire.leaf_table))
    monkeypatch.setattr(wire, "parse_leaves", counted("validated", wire.parse_leaves))
    plan._plans.clear()  # another test may have sent this layout: its table would be written already
    received.forget_all()
    data = torch.rand(7, 4)
    for height in range(100, 140):
        boxes = tvt.BoundingBoxes(data, format="XYXY", canvas_size=(height, 640))
        out = tc.decode(*tc.encode(boxes))
        assert out.canvas_size == (height, 640) and torch.equal(out, data)
    assert counts == {"written": 1, "validated": 1}
    assert len(received._cache) == 40


def test_self_referencing_structure_fails_cleanly():
    loop: list = []
    loop.append(loop)
    with pytest.raises(tc.EncodeError, match="too deep"):
        tc.encode(loop)


def test_unknown_transport_is_an_encode_error():
    with pytest.raises(tc.EncodeError, match="transport"):
        tc.encode(torch.zeros(1), transport="carrier-pigeon")


def test_meta_tensor_after_a_same_shaped_real_one_is_still_refused():
    """Review finding: the single-tensor plan cache once let a meta tensor reach a raw copy."""
    tc.encode(torch.zeros(4))
    with pytest.raises(tc.EncodeError, match="meta"):
        tc.encode(torch.empty(4, device="meta"))


@pytest.mark.parametrize("nested", [False, True])
def test_a_tensor_whose_storage_was_freed_is_refused_not_read(nested):
    tc.encode(torch.zeros(4))  # a cached plan for the same layout must not skip the check
    t = torch.zeros(4)
    t.untyped_storage().resize_(0)
    with pytest.raises(tc.EncodeError, match="storage holds 0 bytes, the view needs 16"):
        tc.encode({"t": t} if nested else t)


def test_a_cached_plan_still_checks_an_offset_views_storage_holds_its_span():
    tc.encode(torch.zeros(8)[4:])  # the layout's plan is cached from here on
    base = torch.zeros(8)
    view = base[4:]  # bytes 16..32 of the storage
    base.untyped_storage().resize_(24)  # now short of the view's last 8 bytes
    with pytest.raises(tc.EncodeError, match="storage holds 24 bytes, the view needs 32"):
        tc.encode(view)


def test_a_namedtuple_registered_after_its_header_was_seen_is_used():
    Late = collections.namedtuple("Late", ["a"])
    first = round_trip(Late(1))
    assert type(first) is not Late
    tc.register_namedtuple(Late)
    assert type(round_trip(Late(2))) is Late


def test_a_small_one_tensor_message_is_encoded_by_one_copy_without_a_destination(monkeypatch):
    """Structural (counted, not timed): a small message (under 4 KiB) that is one dense host
    tensor is copied by one call into its value, with no buffer allocated and no destination set
    up; anything else (a crop, two tensors, 4 KiB and more) is written as before. Either way the
    bytes are the tensor's, and decode restores it exactly (it copies small messages, so the
    value's alignment does not matter)."""
    import pyarrow as pa
    from torchvision import tv_tensors as tvt

    from tensor_codec import codec

    made = collections.Counter()
    real_destination, real_allocate = codec.Destination, codec.pa.allocate_buffer
    monkeypatch.setattr(codec, "Destination", lambda *a: made.update(["destination"]) or real_destination(*a))
    monkeypatch.setattr(codec.pa, "allocate_buffer", lambda n: made.update(["buffer"]) or real_allocate(n))
    boxes = tvt.BoundingBoxes(torch.rand(64, 4), format="XYXY", canvas_size=(480, 640))
    cases = {
        "boxes": (boxes, 0),
        "transposed": (torch.randn(16, 8).t(), 0),
        "crop": (torch.randn(16, 16)[::2], 1),
        "two tensors": ([torch.ones(3), torch.zeros(5)], 1),
        "4 KiB": (torch.randn(1024), 1),
    }
    for name, (obj, written) in cases.items():
        made.clear()
        value, metadata = tc.encode(obj)
        assert made == ({"destination": 1, "buffer": 1} if written else {}), name
        assert value.type == pa.uint8()
        assert_identical(tc.decode(value, metadata), obj)
