"""codec.decode as one function over one cache: the header looked up (or compiled), then the
compiled header's own `view` (one tensor, where the value lies) or `restore` (materialized,
built, registered); and tc.receive (tensor_codec/dora/receive.py) as that decode with the
event's input id."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch
from torchvision import tv_tensors as tvt

import tensor_codec as tc
from tensor_codec import received
from tensor_codec.lifetimes import is_borrowed
from tensor_codec.testing import assert_identical
from tensor_codec.transports.arrow_values import view_of

FRAME = torch.arange(4096, dtype=torch.float32).reshape(64, 64).t()  # 16 KiB: viewed, not copied


def _compiled(metadata: dict) -> received.Compiled:
    compiled = received.cached(metadata["tc.header"])
    assert compiled is not None, "decoded once: the header is cached"
    return compiled


def _shifted(value: pa.Array) -> pa.Array:
    """The same bytes one byte past an aligned address: nothing may view them as a float32."""
    data = bytes(value.buffers()[1])[: len(value)]
    return pa.Array.from_buffers(pa.uint8(), len(value), [None, pa.py_buffer(b"\0" + data)], offset=1)


def test_a_seen_one_tensor_header_is_viewed_where_the_value_lies():
    value, metadata = tc.encode(FRAME)
    tc.decode(value, metadata)  # the header seen
    with tc.scope():
        got = tc.decode(value, metadata, name="frames")
        assert got.data_ptr() == value.buffers()[1].address  # no copy: the message's own bytes
        assert is_borrowed(got) and got._base is None
        assert_identical(got, FRAME, strides="exact")
    assert got.numel() == 0  # released with the scope


def test_the_compiled_header_views_a_message_of_one_tensor_and_declines_what_it_cannot_view():
    value, metadata = tc.encode(FRAME)
    tc.decode(value, metadata)
    compiled = _compiled(metadata)
    with tc.scope():
        got = compiled.view(value, "frames", view_of)
        assert got.data_ptr() == value.buffers()[1].address and is_borrowed(got)
        assert_identical(got, FRAME, strides="exact")
        assert compiled.view(value.slice(0, len(value) - 64), "frames", view_of) is None  # not the header's bytes
        assert compiled.view(_shifted(value), "frames", view_of) is None  # not aligned for a view
        nulls = pa.array([None] + [0] * (len(value) - 1), pa.uint8())
        assert compiled.view(nulls, "frames", view_of) is None
    boxes = tvt.BoundingBoxes(torch.rand(1024, 4), format="XYXY", canvas_size=(8, 8))
    boxes_value, boxes_metadata = tc.encode(boxes)
    tc.decode(boxes_value, boxes_metadata)
    assert _compiled(boxes_metadata).view(boxes_value, None, view_of) is None  # attributes: built


def test_what_the_view_declines_decode_restores_or_refuses():
    value, metadata = tc.encode(FRAME)
    tc.decode(value, metadata)
    got = tc.decode(_shifted(value), metadata)
    assert not is_borrowed(got)  # copied into aligned memory
    assert_identical(got, FRAME, strides="exact")
    nulls = pa.array([None] + [0] * (len(value) - 1), pa.uint8())
    with pytest.raises(tc.DecodeError, match="null"):
        tc.decode(nulls, metadata)


def test_the_compiled_header_restores_a_message_as_asked():
    sample = {"boxes": tvt.BoundingBoxes(torch.rand(1024, 4), format="XYXY", canvas_size=(8, 8)), "t": FRAME}
    value, metadata = tc.encode(sample)
    tc.decode(value, metadata)
    compiled = _compiled(metadata)
    with tc.scope():
        lent = compiled.restore(value, metadata, False, None, "frames")
        assert all(is_borrowed(t) for t in lent.values())
        assert_identical(lent, sample, strides="exact")
    owned = compiled.restore(value, metadata, True, None, "frames")
    assert not any(is_borrowed(t) for t in owned.values())
    assert_identical(owned, sample, strides="exact")
    value, metadata = tc.encode(FRAME)
    tc.decode(value, metadata)
    got = _compiled(metadata).restore(value, metadata, True, None, None)  # one plain tensor: the leaf itself
    assert type(got) is torch.Tensor and not is_borrowed(got)
    assert_identical(got, FRAME, strides="exact")


# --------------------------------------------------------------------------------------------
# tc.receive: the event's checks, then decode


def _event(obj, input_id="frames") -> dict:
    value, metadata = tc.encode(obj)
    return {"type": "INPUT", "id": input_id, "value": value, "metadata": {**metadata, "timestamp": 0}}


def test_receive_is_decode_with_the_events_input_id():
    from tensor_codec.dora.receive import receive

    event = _event(FRAME)
    receive(event)  # the header seen
    with tc.scope():
        got = receive(event)
        assert got.data_ptr() == event["value"].buffers()[1].address and is_borrowed(got)
        assert_identical(got, FRAME, strides="exact")
    copied = receive(event, copy=True)
    assert not is_borrowed(copied)
    assert_identical(copied, FRAME, strides="exact")
    with pytest.raises(tc.SharedViewWriteError, match="input 'frames'"):
        with tc.scope():
            receive(event).add_(1)


@pytest.mark.parametrize(
    "event, expected",
    [
        ({"type": "STOP"}, "event.type: expected 'INPUT', got 'STOP'"),
        ([1, 2], "event.type: expected 'INPUT', got 'list'"),
        ({"type": "INPUT", "metadata": {}}, "event: expected key 'value', missing"),
        ({"type": "INPUT", "value": pa.array([], pa.uint8())}, "event: expected key 'metadata', missing"),
        ({"type": "INPUT", "value": pa.array([], pa.uint8()), "metadata": {}}, "metadata: expected key 'tc.header'"),
    ],
    ids=["stop", "not-a-dict", "no-value", "no-metadata", "no-header"],
)
def test_receive_refuses_an_event_that_is_no_codec_input_naming_what_is_wrong(event, expected):
    from tensor_codec.dora.receive import receive

    with pytest.raises(tc.DecodeError) as found:
        receive(event)
    assert str(found.value).startswith(expected)
