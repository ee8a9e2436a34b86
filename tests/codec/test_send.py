"""tc.send / tc.receive against a stand-in for dora's Node (the loop itself is tested with real
dora in tests/e2e/test_dora_e2e.py): one pass into the send buffer, reserved keys, size limits."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
import torch

import tensor_codec as tc
from tensor_codec import send_pipeline
from tensor_codec.dora import Link, user_metadata
from tensor_codec.dora import limits as dora_limits
from tensor_codec.dora import output as dora_output
from tensor_codec.testing import assert_identical, make_suite
from tensor_codec.wire.buffer import UNIT_NAMES, UNIT_TYPES
from tests.support.calls import with_c_calls_named
from tests.support.fakes import FakeNode
from tests.support.wire import transport_of
from tools.fuzz import execute as fuzz_execute


def as_event(sent, input_id="in"):
    output_id, raw, metadata = sent
    return {
        "type": "INPUT",
        "id": input_id,
        "value": pa.array(list(raw), pa.uint8()) if raw else pa.array([], pa.uint8()),
        "metadata": metadata,
    }


@pytest.mark.parametrize(
    "name",
    [
        "layout/stacked",
        "layout/strided_crop",
        "tv/boxes_xyxy",
        "nested/detection",
        "packed/packed_unsorted",
        "nested/empty_dict",
    ],
)
def test_send_writes_exactly_what_encode_produces(name):
    obj = make_suite()[name]
    node = FakeNode()
    tc.send(node, "out", obj, {"frame": 3})
    ((output_id, raw, metadata),) = node.sent
    value, expected_metadata = tc.encode(obj)
    assert output_id == "out" and raw == value.buffers()[1].to_pybytes()[: len(value)] if len(value) else raw == b""
    assert metadata == {"frame": 3, **expected_metadata}
    assert_identical(tc.receive(as_event(node.sent[0])), obj)


def test_padding_never_carries_stale_buffer_bytes():
    node = FakeNode()
    tc.send(node, "out", [torch.ones(3, dtype=torch.uint8), torch.ones(3, dtype=torch.uint8)])
    raw = node.sent[0][1]
    assert raw[3:64] == b"\0" * 61 and b"\xaa" not in raw


def _aten_ops(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events()]


def test_a_non_contiguous_tensor_is_compacted_in_one_copy_straight_into_the_buffer():
    crop = torch.randn(512, 512)[::2, 1::3]
    node = FakeNode()
    ops = _aten_ops(lambda: tc.send(node, "out", crop))
    assert ops.count("aten::copy_") == 1
    assert not {"aten::contiguous", "aten::clone", "aten::to", "aten::_to_copy"} & set(ops)
    assert torch.equal(tc.receive(as_event(node.sent[0])), crop)


@pytest.mark.parametrize(
    "dora_copies_below, memmove_max, copies",
    [(None, None, 0), (0, 0, 1), (0, None, 0)],
    ids=["dora-copies", "torch-copy", "memmove"],
)
def test_a_dense_permuted_tensor_is_one_byte_copy(monkeypatch, dora_copies_below, memmove_max, copies):
    """Its bytes are copied as they lie, once, never made contiguous first: by dora's send_output
    from the tensor's own memory (below the output's `copies_below`: no aten op at all), or
    into send_output_raw's buffer by torch's copy above layout._MEMMOVE_MAX (one aten::copy_) or
    by one memmove below it (no aten op)."""
    from tensor_codec import layout

    if memmove_max is not None:
        monkeypatch.setattr(layout, "_MEMMOVE_MAX", memmove_max)
    big = torch.randn(2, 3, 256, 256).contiguous(memory_format=torch.channels_last)
    node = FakeNode()
    if dora_copies_below is not None:
        Link.of(node).output("out").copies_below = dora_copies_below
    raw = []
    monkeypatch.setattr(
        node, "send_output_raw", lambda *a, **k: raw.append(a) or FakeNode.send_output_raw(node, *a, **k)
    )
    ops = _aten_ops(lambda: tc.send(node, "out", big))
    assert ops.count("aten::copy_") == copies and "aten::contiguous" not in ops
    assert len(raw) == (dora_copies_below == 0)
    received = tc.receive(as_event(node.sent[0]))
    assert torch.equal(received, big) and received.stride() == big.stride()


@pytest.mark.parametrize("path", ["encode", "send"])
def test_encode_and_send_go_one_pipeline_and_give_the_layout_up_when_a_write_fails(monkeypatch, path):
    """Both paths lay the message out through send_pipeline once and write with its transport; a write
    that fails (after the layout was made) gives the layout up once and reaches the caller."""
    from tensor_codec.transports.host import HostTransport

    laid, abandoned = [], []
    real_lay_out = send_pipeline.lay_out
    monkeypatch.setattr(send_pipeline, "lay_out", lambda *a, **k: laid.append(a[1]) or real_lay_out(*a, **k))
    monkeypatch.setattr(HostTransport, "abandon", lambda self, outgoing: abandoned.append(outgoing))
    node = FakeNode(pool=1 << 30)
    big = torch.arange(64 * 1024, dtype=torch.float32)[::2]  # compacted: written, never a value dora copies
    go = (lambda obj: tc.encode(obj)) if path == "encode" else (lambda obj: tc.send(node, "out", obj))
    go(big)
    assert laid == (["host"] if path == "encode" else ["auto"]) and abandoned == []  # each default

    def failing(self, outgoing, dest):
        raise RuntimeError("the write failed")

    monkeypatch.setattr(HostTransport, "write", failing)
    with pytest.raises(RuntimeError, match="the write failed"):
        go(big[1:])  # another layout: not a stream's repeat, which skips the pipeline
    assert len(laid) == 2 and len(abandoned) == 1
    assert path == "encode" or len(node.sent) == 1  # nothing more left


def test_a_transport_named_by_a_str_enum_is_taken_as_its_text():
    """A str subclass (an Enum of the caller's, numpy's str_) names a transport as its text does,
    in encode and in send, and transport_for reports the same choice send makes."""
    import enum

    class Way(enum.StrEnum):
        HOST = "host"
        IPC = "cuda-ipc"
        AUTO = "auto"

    t = torch.arange(6.0)
    value, metadata = tc.encode(t, transport=Way.IPC)  # no CUDA tensor: host bytes, as for "cuda-ipc"
    assert transport_of(metadata) == "host"
    assert_identical(tc.decode(value, metadata), t)
    node = FakeNode()
    assert tc.send(node, "out", t, transport=Way.AUTO) is True
    assert tc.send(node, "out", t, transport=Way.HOST) is True
    assert tc.transport_for(node, "out", t)[0] == "host"
    with pytest.raises(tc.EncodeError, match="expected one of"):
        tc.encode(t, transport=7)


def test_reserved_metadata_keys_are_refused():
    with pytest.raises(tc.EncodeError, match="reserved"):
        tc.send(FakeNode(), "out", torch.zeros(1), {"tc.header": "mine"})


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(4096.0),  # sent again: the stream's repeat
        lambda: torch.arange(8192, dtype=torch.int16).reshape(64, 128)[:, ::2],  # a crop, written by tc
        lambda: {"boxes": torch.zeros(2, 4), "frame": 3},  # a structure: the full path every time
    ],
    ids=["repeat", "crop", "structure"],
)
def test_a_host_message_carries_one_codec_key_beside_the_callers(make):
    """dora carries each metadata key at a cost of its own (docs/wire-format.md, section 1): the
    codec adds `tc.header` alone, on the full path and on a stream's repeat alike."""
    node = FakeNode()
    for frame in range(3):
        tc.send(node, "out", make(), {"frame": frame})
    for sent in node.sent:
        assert sorted(sent[2]) == ["frame", "tc.header"]
        assert_identical(tc.receive(as_event(sent), copy=True), make())


def test_which_metadata_is_a_codec_message():
    assert tc.is_codec_message(tc.encode(torch.zeros(1))[1])
    assert tc.is_codec_message({"tc.header": 7})  # its own, and malformed: decode names the problem
    assert tc.is_codec_message({"tc.version": 1, "tc.header": "{}"})  # version 1's, refused by decode
    for other in ({}, {"encoding": "rgb8", "width": 4}, {"tc.ipc.slot": 1}, [("tc.header", "{}")], None):
        assert not tc.is_codec_message(other)


def test_a_streams_metadata_keys_are_checked_once_and_a_bad_key_every_time(monkeypatch):
    """Structural (counted, not timed): the caller's keys, which a stream repeats message after
    message, are checked once per set of keys; a set with a reserved, image or unencodable key
    is never taken as checked, so every message carrying it is refused."""
    checked = []
    real = user_metadata.keys_pass
    monkeypatch.setattr(user_metadata, "keys_pass", lambda keys: checked.append(keys) or real(keys))
    node = FakeNode()
    frame = torch.randn(64, 64)
    for seq in range(5):
        tc.send(node, "out", frame, {"seq": seq, "label": f"frame {seq}", "shape": [64, 64]})
    assert checked == [("seq", "label", "shape")] and len(node.sent) == 5
    for bad in ({"tc.header": "mine"}, {"encoding": "rgb8"}, {"\udc00": 1}):
        for _ in range(2):
            with pytest.raises(tc.EncodeError):
                tc.send(node, "out", frame, {"seq": 0, **bad})
    assert len(node.sent) == 5


@pytest.mark.parametrize("key", ["encoding", "width", "height"])
def test_dora_image_keys_are_refused_on_codec_messages(key):
    """dora-hub image nodes read any message with these keys as flat interleaved pixels: a codec
    message carrying them is scrambled downstream without an error, so it cannot be sent."""
    node = FakeNode()
    with pytest.raises(tc.EncodeError, match=rf"metadata.{key}: dora's image key.*tc.send_plain.*pixel_format"):
        tc.send(node, "out", torch.zeros(3, 4, 4, dtype=torch.uint8), {key: "rgb8" if key == "encoding" else 4})
    assert not node.sent
    tc.send_plain(node, "out", torch.zeros(4, 4, 3, dtype=torch.uint8), {"encoding": "rgb8", "width": 4, "height": 4})


def test_a_message_no_route_can_carry_fails_before_writing_and_names_the_pool_setting():
    node = FakeNode()  # dora's default 8 MiB pool
    big = torch.zeros(61 << 20, dtype=torch.uint8)
    with pytest.raises(tc.MessageTooLargeError) as info:
        tc.send(node, "frames", big)
    message = str(info.value)
    assert "shared_memory_pool_size" in message and "frames" in message
    # 256MB, not 128MB: a pool holds a message's Arrow stream (1/8 more: dora's validity bitmap),
    # two of them (the one a receiver still holds, and the next) take 137 MiB.
    assert str(big.numel()) in message and "256MB" in message and "dora's default" in message
    assert node.sent == []


def test_a_configured_pool_lets_a_big_message_through():
    node = FakeNode(pool=256 << 20)
    tc.send(node, "frames", torch.zeros(61 << 20, dtype=torch.uint8))
    assert len(node.sent[0][1]) == 61 << 20


def test_a_message_over_the_pool_but_under_the_daemon_limit_warns_once(caplog):
    node = FakeNode()
    with caplog.at_level(logging.WARNING, logger="tensor_codec"):
        for _ in range(3):
            tc.send(node, "frames", torch.zeros(9 << 20, dtype=torch.uint8))
    warnings = [r for r in caplog.records if "shared_memory_pool_size" in r.getMessage()]
    assert len(warnings) == 1 and "slow fallback path" in warnings[0].getMessage()


def test_pool_size_from_the_environment(monkeypatch):
    monkeypatch.setenv("DORA_NODE_SHM_POOL_SIZE", str(64 << 20))
    assert Link.of(FakeNode()).pool == (64 << 20, "DORA_NODE_SHM_POOL_SIZE")


def test_doras_own_size_error_becomes_a_clear_codec_error():
    node = FakeNode(
        fail='output "x": IPC-encoded message is 9 bytes, exceeding the 67108864-byte daemon transport limit'
    )
    with pytest.raises(tc.MessageTooLargeError, match="shared_memory_pool_size"):
        tc.send(node, "x", torch.zeros(4))


def test_suggested_pool_holds_two_messages():
    assert dora_limits.suggested_pool(70 << 20) == "256MB"
    assert dora_limits.suggested_pool(10 << 20) == "32MB"


def test_cuda_ipc_without_a_cuda_tensor_sends_host_bytes_and_says_why_once(caplog):
    """The suite's nested/empty_dict under TRANSPORT=cuda-ipc: nothing to share on a GPU, so it
    goes as host bytes instead of failing the send (and losing the message)."""
    node = FakeNode()
    with caplog.at_level(logging.INFO, logger="tensor_codec"):
        for obj in ({}, {}, {"x": torch.arange(4)}):
            assert tc.send(node, "out", obj, transport="cuda-ipc")
    assert [transport_of(m) for _, _, m in node.sent] == ["host"] * 3
    assert_identical(tc.receive(as_event(node.sent[2]), copy=True), {"x": torch.arange(4)})
    said = [r.getMessage() for r in caplog.records if "transport" in r.getMessage()]
    assert said == [
        "output 'out': transport host (no CUDA tensor in the message: cuda-ipc shares GPU memory, so host bytes "
        "carry it)"
    ]


# ---------------------------------------------------------------------------- a stream's repeats


def _counting_plans(monkeypatch) -> list:
    made = []
    real = send_pipeline.make_plan  # the send path's one planning step
    monkeypatch.setattr(send_pipeline, "make_plan", lambda obj: made.append(obj) or real(obj))
    return made


def test_a_stream_of_one_layout_is_planned_once_and_sends_each_tensors_current_bytes(monkeypatch):
    """The steady state of a stream: after its first message an output's plain host tensor of the
    same dtype, shape and strides is sent without a plan, a layout or a route check (the same
    header), by dora's send_output from the tensor's own memory; never a stale copy."""
    made = _counting_plans(monkeypatch)
    node = FakeNode()
    t = torch.arange(4096, dtype=torch.float32).reshape(64, 64).t()  # dense, not contiguous
    tc.send(node, "out", t, {"frame": 0})
    for frame in range(1, 4):
        t.add_(1)  # the same tensor written between messages: each message has its bytes then
        tc.send(node, "out", t, {"frame": frame})
    assert len(made) == 1
    assert [m for _, _, m in node.sent][1:] == [{"frame": f, **node.sent[0][2]} | {"frame": f} for f in range(1, 4)]
    for frame, sent in enumerate(node.sent):
        got = tc.receive(as_event(sent))
        assert torch.equal(got, torch.arange(4096, dtype=torch.float32).reshape(64, 64).t() + frame)
        assert got.stride() == t.stride()


def test_a_stream_whose_metadata_keys_change_every_message_still_repeats(monkeypatch):
    """The caller's keys are checked before anything else; keys not seen before (a stream whose
    keys change with every message, past what the checked sets keep) are checked and the message
    is still the stream's repeat: one plan for the stream, every key sent."""
    made = _counting_plans(monkeypatch)
    node = FakeNode()
    t = torch.randn(64, 64)
    n = 300  # past what the output keeps of the key sets that passed
    for frame in range(n):
        tc.send(node, "out", t, {f"key {frame}": frame})
    assert len(made) == 1 and len(Link.of(node).output("out")._keys_ok) < n
    assert [sorted(m) for _, _, m in node.sent[-2:]] == [[f"key {f}", "tc.header"] for f in (n - 2, n - 1)]


@pytest.mark.parametrize("kind", ["crop", "span-over-dora-copies"])
def test_a_stream_written_into_the_raw_buffer_is_planned_once_and_copied_once(monkeypatch, kind):
    """The steady state of a stream whose bytes tc writes into send_output_raw's buffer (a crop,
    compacted; a dense span from the output's `copies_below` up): after its first message, no
    plan, layout or route check, one copy straight into the buffer (one aten::copy_ for the crop,
    one memmove for the span), each message with the tensor's bytes at that time."""
    made = _counting_plans(monkeypatch)
    node = FakeNode()
    if kind == "span-over-dora-copies":
        Link.of(node).output("out").copies_below = 1024
        base = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64)
        t = base.t()  # dense, in another dim order: its span as it lies
    else:
        base = torch.arange(128 * 128, dtype=torch.float32).reshape(128, 128)
        t = base[::2, 1::2]
    raw = []
    real_raw = FakeNode.send_output_raw
    monkeypatch.setattr(node, "send_output_raw", lambda *a, **k: raw.append(a) or real_raw(node, *a, **k))
    tc.send(node, "out", t, {"frame": 0})
    for frame in range(1, 4):
        base.add_(1)  # written between messages: each message has the bytes of its time
        ops = _aten_ops(lambda frame=frame: tc.send(node, "out", t, {"frame": frame}))
        assert ops.count("aten::copy_") == (kind == "crop")
        assert not {"aten::contiguous", "aten::clone", "aten::to", "aten::_to_copy"} & set(ops)
    assert len(made) == 1 and len(raw) == 4
    assert [m for _, _, m in node.sent][1:] == [node.sent[0][2] | {"frame": f} for f in range(1, 4)]
    for frame, sent in enumerate(node.sent):
        got = tc.receive(as_event(sent))
        expected = t - 3 + frame
        assert torch.equal(got, expected) and got.stride() == (expected.stride() if kind != "crop" else (64, 1))


@pytest.mark.parametrize("kind", ["Image", "Video", "Mask"])
def test_a_stream_of_one_attributeless_tvtensor_is_planned_once(monkeypatch, kind):
    """Image, Video and Mask carry no attributes (the project's camera and JPEG decoder send
    Images): after the first message an output's next one of the same class and layout is a
    repeat too, with its class's header and the tensor's current bytes."""
    from torchvision import tv_tensors

    cls = getattr(tv_tensors, kind)
    made = _counting_plans(monkeypatch)
    node = FakeNode()
    shape = {"Image": (3, 32, 48), "Video": (2, 3, 32, 48), "Mask": (32, 48)}[kind]
    base = torch.arange(int(torch.tensor(shape).prod()), dtype=torch.int32).reshape(shape)
    frame = cls(base)
    for _ in range(4):
        tc.send(node, "out", frame)
        base.add_(1)
    plain = base.clone()
    tc.send(node, "out", plain)  # the plain tensor of the same layout: its own header
    assert len(made) == 2
    headers = [m["tc.header"] for _, _, m in node.sent]
    assert len(set(headers[:4])) == 1 and headers[4] != headers[0]
    for i, sent in enumerate(node.sent[:4]):
        got = tc.receive(as_event(sent))
        assert type(got) is cls and torch.equal(got.as_subclass(torch.Tensor), base - 4 + i)
    assert type(tc.receive(as_event(node.sent[4]))) is torch.Tensor


class _TorchFunctionSpyNode(FakeNode):
    """A Python node that notes, as it sends, whether TVTensors' __torch_function__ is on."""

    def __init__(self):
        super().__init__()
        self.torch_function_on = []

    def send_output(self, output_id, data, metadata=None):
        self.torch_function_on.append(torch._C._is_torch_function_enabled())
        return super().send_output(output_id, data, metadata)

    def send_output_raw(self, output_id, data_length, metadata=None):
        self.torch_function_on.append(torch._C._is_torch_function_enabled())
        return super().send_output_raw(output_id, data_length, metadata)


def test_an_images_repeat_reads_the_image_itself_with_its_torch_function_off_for_those_reads_alone():
    """A repeat of an Image reads its tensor state with subclasses' __torch_function__ off, on
    the Image itself: no plain alias made of it (a second tensor object costs a dora node about
    18 us a message). It is on again for dora's send (a Python node wrapping dora runs its own
    code) and after the send, whether it was sent, written (a crop), fell to the full path, or
    raised there."""
    from torchvision import tv_tensors

    node = _TorchFunctionSpyNode()
    base = torch.randn(3, 64, 64)
    frame = tv_tensors.Image(base)
    tc.send(node, "out", frame)  # the first: planned in full
    for c_function in ("as_subclass", "_make_subclass"):
        sent, made = with_c_calls_named(c_function, tc.send, node, "out", frame)
        assert sent is True and made == 0, c_function
        assert torch._C._is_torch_function_enabled()
    got = tc.receive(as_event(node.sent[-1]))
    assert type(got) is tv_tensors.Image and torch.equal(got.as_subclass(torch.Tensor), base)

    strided = tv_tensors.Image(base[:, ::2, 1::2])  # compacted into send_output_raw's buffer
    for _ in range(2):  # the first, then its repeat
        assert tc.send(node, "out", strided) is True
        got = tc.receive(as_event(node.sent[-1]))
        assert type(got) is tv_tensors.Image and torch.equal(got.as_subclass(torch.Tensor), base[:, ::2, 1::2])

    crop = tv_tensors.Image(base[:, :32])  # a view of the first rows: its repeat checks the storage
    tc.send(node, "out", crop)
    base.untyped_storage().resize_(0)
    with pytest.raises(tc.EncodeError, match="storage holds 0 bytes"):
        tc.send(node, "out", crop)
    assert torch._C._is_torch_function_enabled()
    assert type(tv_tensors.Image(torch.zeros(1, 2, 2)) + 0) is torch.Tensor  # TVTensors unwrap again
    assert node.torch_function_on == [True] * 6


def test_a_tvtensor_with_attributes_is_planned_every_time(monkeypatch):
    """BoundingBoxes carry attributes (format, canvas size) that may change with every message:
    never a repeat."""
    from torchvision import tv_tensors

    made = _counting_plans(monkeypatch)
    node = FakeNode()
    boxes = tv_tensors.BoundingBoxes(torch.rand(512, 4) * 64, format="XYXY", canvas_size=(64, 64))
    for _ in range(3):
        tc.send(node, "out", boxes)
    assert len(made) == 3
    assert_identical(tc.receive(as_event(node.sent[2])), boxes)


def test_a_cropped_repeat_whose_storage_was_freed_is_refused_naming_it_not_read():
    """The crop's repeat checks its storage as the full path does (every element it addresses):
    a storage resized away after the first message is named, and nothing is sent."""
    node = FakeNode()
    base = torch.randn(64, 64)
    crop = base[::2, ::2]
    tc.send(node, "out", crop)
    base.untyped_storage().resize_(0)
    with pytest.raises(tc.EncodeError, match="storage holds 0 bytes"):
        tc.send(node, "out", crop)
    assert len(node.sent) == 1


@pytest.mark.parametrize(
    "second",
    [
        lambda t: t.reshape(32, 128),  # another shape
        lambda t: t.t(),  # other strides
        lambda t: t.double(),  # another dtype
        lambda t: t[:, :32],  # a crop: compacted
        lambda t: t._neg_view(),  # a lazy bit: the storage does not hold the values
        lambda t: t.expand(2, 64, 64),  # broadcast: sent once
        lambda t: tc_image(t),  # a TVTensor: its own header
        lambda t: t.clone().requires_grad_(True),  # autograd: its own header
    ],
    ids=["shape", "strides", "dtype", "crop", "neg-view", "expand", "tvtensor", "requires-grad"],
)
def test_anything_but_a_repeat_takes_the_full_path(monkeypatch, second):
    made = _counting_plans(monkeypatch)
    node = FakeNode()
    t = torch.randn(64, 64)
    tc.send(node, "out", t)
    other = second(t)
    tc.send(node, "out", other)
    assert len(made) == 2
    got = tc.receive(as_event(node.sent[1]))
    assert_identical(got, other.resolve_neg() if other.is_neg() else other)


def test_a_tensor_requiring_grad_is_never_a_repeat_nor_repeated():
    """Its header says `grad`: a plain tensor after it, of the same layout, has its own header
    (and a second one requiring grad is planned again, keeping its flag)."""
    node = FakeNode()
    graded = torch.randn(64, 64, requires_grad=True)
    plain = torch.randn(64, 64)
    for t in (graded, plain, plain, graded):
        tc.send(node, "out", t)
    got = [tc.receive(as_event(sent)) for sent in node.sent]
    assert [g.requires_grad for g in got] == [True, False, False, True]
    for g, t in zip(got, (graded, plain, plain, graded)):
        assert torch.equal(g.detach(), t.detach())


def test_a_repeat_is_checked_again_under_new_limits():
    """A repeat skips the checks its header passed under the limits of its first message:
    set_limits forgets the repeats, so the next message is checked under the new ones."""
    node = FakeNode()
    frame = torch.randn(64, 64)  # 16 KiB of logical bytes
    tc.send(node, "out", frame)
    tc.send(node, "out", frame)  # a repeat
    previous = tc.set_limits(leaf_logical_bytes=4096)
    try:
        with pytest.raises(tc.EncodeError, match="leaf_logical_bytes"):
            tc.send(node, "out", frame)
    finally:
        tc.set_limits(previous)
    assert len(node.sent) == 2
    tc.send(node, "out", frame)
    assert len(node.sent) == 3


def tc_image(t):
    from torchvision import tv_tensors

    return tv_tensors.Image(t.unsqueeze(0))


def test_a_repeat_whose_storage_was_freed_is_refused_not_read(monkeypatch):
    """The repeat still checks the tensor's own state: a view whose storage was resized away after
    the first message would be read at a dangling address; the full path names it instead."""
    node = FakeNode()
    base = torch.randn(64, 64)
    view = base[:32]
    tc.send(node, "out", view)
    base.untyped_storage().resize_(0)
    with pytest.raises(tc.EncodeError, match="storage holds 0 bytes"):
        tc.send(node, "out", view)
    assert len(node.sent) == 1


def test_an_output_sending_a_few_layouts_in_turn_plans_each_once(monkeypatch):
    made = _counting_plans(monkeypatch)
    node = FakeNode()
    layouts = [torch.randn(8, 8), torch.randn(8, 8).t(), torch.randn(4, 16, dtype=torch.float64)]
    for _ in range(3):
        for t in layouts:
            tc.send(node, "out", t)
    assert len(made) == 3
    for sent, t in zip(node.sent[-3:], layouts):
        assert_identical(tc.receive(as_event(sent)), t)


def test_repeats_are_bounded_dropping_the_oldest(monkeypatch):
    monkeypatch.setattr(dora_output, "PREPARED_MAX", 2)
    made = _counting_plans(monkeypatch)
    node = FakeNode()
    a, b, c = torch.zeros(1), torch.zeros(2), torch.zeros(3)
    for t in (a, b, c, c, b, a):
        tc.send(node, "out", t)
    assert [t.numel() for t in made] == [1, 2, 3, 1]  # c and b were kept, a was dropped for c


def test_repeats_are_kept_per_output_and_node():
    node, other = FakeNode(), FakeNode()
    a, b = torch.randn(16), torch.randn(4, 4)
    tc.send(node, "a", a)
    tc.send(node, "b", b)
    tc.send(other, "a", b)
    tc.send(node, "a", a)
    tc.send(node, "b", b)
    headers = [m["tc.header"] for _, _, m in node.sent]
    assert headers[0] == headers[2] and headers[1] == headers[3] and headers[0] != headers[1]
    assert tc.receive(as_event(other.sent[0])).shape == (4, 4)


# ---------------------------------------------------------------------------- the prepared path


def _counting_lay_outs(monkeypatch) -> list:
    """The send pipeline's layouts made (Output.send's full path: plan, transport, layout, checks)."""
    laid = []
    real = send_pipeline.lay_out
    monkeypatch.setattr(send_pipeline, "lay_out", lambda obj, *a, **k: laid.append(obj) or real(obj, *a, **k))
    return laid


def _message(sent) -> tuple[bytes, dict]:
    """A message the FakeNode got, as the bytes and metadata a receiver gets."""
    _, raw, metadata = sent
    return bytes(raw), dict(metadata)


def test_a_stream_of_one_signature_is_laid_out_once_with_the_same_metadata(monkeypatch):
    """Structural (counted): an Output's second and later messages of one dtype, shape and strides
    go by its Prepared, never through send_pipeline.lay_out, with the first message's metadata."""
    laid = _counting_lay_outs(monkeypatch)
    node = FakeNode()
    t = torch.randn(48, 64)
    for _ in range(4):
        tc.send(node, "out", t)
    assert len(laid) == 1 and len(node.sent) == 4
    assert all(m == node.sent[0][2] for _, _, m in node.sent[1:])
    assert list(Link.of(node).output("out").prepared) == [(torch.Tensor, t.dtype, t.shape, t.stride())]


def _tv_image(t):
    from torchvision import tv_tensors

    return tv_tensors.Image(t)


def _another_signature():
    return torch.randn(64, 64), torch.randn(32, 128)


def _requiring_grad():  # the stream's own signature, which a prepared send must not take
    return torch.randn(64, 64), torch.randn(64, 64).requires_grad_(True)


def _conjugated():  # ditto: the conj bit leaves dtype, shape and strides as they are
    z = torch.randn(64, 64, dtype=torch.complex64)
    return z, torch.randn(64, 64, dtype=torch.complex64).conj()


def _image():
    return torch.randn(3, 32, 48), _tv_image(torch.randn(3, 32, 48))


def _crop():  # the stream's dtype and shape, other strides: compacted into dora's buffer
    return torch.randn(64, 64), torch.randn(128, 128)[::2, 1::2]


@pytest.mark.parametrize(
    "make, lay_outs",
    [(_another_signature, 1), (_requiring_grad, 2), (_conjugated, 2), (_image, 1), (_crop, 1)],
    ids=["shape", "requires-grad", "conj", "tv-image", "strided-crop"],
)
def test_after_a_prepared_stream_each_message_arrives_bit_exact_and_plain_then_prepared_are_identical(
    monkeypatch, make, lay_outs
):
    """A stream prepared for one signature, then another object sent twice: a changed shape, a
    tensor requiring grad or with the conj bit (the stream's own signature: never its Prepared),
    a TVTensor Image, a strided crop. Each arrives bit-exact, its two messages (the full path's,
    then the prepared one's where it has one) are byte for byte what `tc.encode` makes, and
    `lay_outs` says which path the second took."""
    laid = _counting_lay_outs(monkeypatch)
    node = FakeNode()
    stream, other = make()
    tc.send(node, "out", stream)
    tc.send(node, "out", stream)  # the stream's Prepared
    assert len(laid) == 1 and _message(node.sent[0]) == _message(node.sent[1])
    tc.send(node, "out", other)
    tc.send(node, "out", other)
    assert len(laid) == 1 + lay_outs
    value, metadata = tc.encode(other)
    expected = (value.buffers()[1].to_pybytes()[: len(value)], metadata)
    assert _message(node.sent[2]) == _message(node.sent[3]) == expected
    for sent in node.sent[2:]:
        got = tc.receive(as_event(sent), copy=True)
        assert_identical(got, other)
        assert got.requires_grad == other.requires_grad and not got.is_conj()


def test_new_limits_make_the_next_send_plan_again(monkeypatch):
    """A Prepared holds the codec limits it was checked under: after tc.set_limits the next
    message is laid out (and checked) again, and prepared under the new limits."""
    laid = _counting_lay_outs(monkeypatch)
    node = FakeNode()
    t = torch.randn(64, 64)
    tc.send(node, "out", t)
    tc.send(node, "out", t)
    assert len(laid) == 1
    previous = tc.set_limits(leaf_logical_bytes=tc.limits.current().leaf_logical_bytes + 1)
    try:
        tc.send(node, "out", t)
        assert len(laid) == 2
        tc.send(node, "out", t)
        assert len(laid) == 2  # prepared again, under these limits
    finally:
        tc.set_limits(previous)
    tc.send(node, "out", t)
    assert len(laid) == 3
    assert all(_message(sent) == _message(node.sent[0]) for sent in node.sent)


# ---------------------------------------------------------------------------- the value's units


def _wide(value: pa.Array, unit: pa.DataType) -> pa.Array:
    """The same bytes as an array of another fixed-width type (what tc.send may hand dora)."""
    width = unit.bit_width // 8
    return pa.Array.from_buffers(unit, len(value) // width, [None, value.buffers()[1]])


# Every Arrow type a host value may hold its bytes in, besides UInt8 (wire-format.md, section 5),
# as the fuzzer's oracle lists them independently of the codec (the test below ties the two).
OTHER_UNITS = [unit for unit in fuzz_execute._UNITS if unit != pa.uint8()]


def test_the_types_a_value_may_have_are_the_formats_and_the_fuzz_oracles():
    """wire-format.md, section 5 lists them; the fuzzer's oracle keeps its own list on purpose
    (an independent check), tied here to the codec's so they cannot drift apart."""
    assert [pa.uint8(), *OTHER_UNITS] == list(UNIT_TYPES)
    assert set(fuzz_execute._UNITS) == set(UNIT_TYPES)


def _wide_cases() -> dict:
    from torchvision import tv_tensors

    return {
        "one-leaf": torch.randn(64, 64),  # viewed in place
        "padded": {  # several leaves, padding between them, bool bytes checked
            "a": torch.randn(1001),
            "mask": torch.rand(3000) > 0.5,
            "b": torch.arange(777, dtype=torch.int16),
        },
        "image": tv_tensors.Image(torch.randint(0, 255, (3, 64, 64), dtype=torch.uint8)),
        "small": make_suite()["layout/transposed"],  # copied (under 4 KiB)
    }


@pytest.mark.parametrize("name", ["one-leaf", "padded", "image", "small"])
@pytest.mark.parametrize("unit", OTHER_UNITS, ids=str)
def test_a_value_of_any_fixed_width_type_decodes_like_its_bytes(name, unit):
    """wire-format.md, section 5: readers accept the bytes as any fixed-width integer or float
    type, on every path (one leaf viewed in place, typed as the leaf or not, several leaves with
    padding, bool bytes checked, copied, keep)."""
    obj = _wide_cases()[name]
    value, metadata = tc.encode(obj)
    if len(value) % (unit.bit_width // 8):
        pytest.skip("these bytes do not tile into this unit")
    with tc.scope():
        got = tc.decode(_wide(value, unit), metadata)
        assert_identical(got, obj)
        kept = tc.keep(got)
    assert_identical(kept, obj)


def test_a_wide_value_slice_counts_its_offset_in_units():
    t = torch.arange(1 << 12, dtype=torch.float32)
    value, metadata = tc.encode(t)
    wide = _wide(pa.concat_arrays([pa.array([0] * 8, pa.uint8()), value]), pa.uint64()).slice(1)
    assert_identical(tc.decode(wide, metadata), t)


@pytest.mark.parametrize(
    "value, match",
    [
        (pa.array(range(3), pa.uint16()), r"expected 16 bytes \(the end of the last leaf\), got 6"),
        (pa.array([1, None, 3, 4, 5, 6, 7, 8], pa.uint16()), "expected no nulls, got 1"),
        (pa.array([True] * 128), f"expected Arrow type {UNIT_NAMES}, got bool"),
        (pa.array([0] * 4, pa.date32()), f"expected Arrow type {UNIT_NAMES}, got date32"),
        (pa.array(["0123456789abcdef"]), f"expected Arrow type {UNIT_NAMES}, got string"),
    ],
    ids=["short", "nulls", "bool", "date", "string"],
)
def test_a_value_of_another_type_or_length_is_refused_naming_what_came(value, match):
    _, metadata = tc.encode(torch.zeros(4))
    with pytest.raises(tc.DecodeError, match=rf"^value: {match}"):
        tc.decode(value, metadata)


@pytest.mark.parametrize(
    "tensor, unit",
    [
        (torch.zeros(1024), pa.float32()),  # typed as the leaf
        (torch.zeros(3, dtype=torch.float16), pa.float16()),
        (torch.zeros(1024, dtype=torch.int64), pa.int64()),
        (torch.zeros(9)[1:], pa.float32()),  # at an address 4 past a multiple of 8
        (torch.zeros(1024, dtype=torch.uint8), pa.uint64()),  # 1-byte dtypes: the widest unit
        (torch.zeros(1001, dtype=torch.uint8), pa.uint8()),
        (torch.zeros(1024, dtype=torch.bool), pa.uint64()),
        (torch.zeros(1024, dtype=torch.bfloat16), pa.uint64()),  # no such Arrow type
        (torch.zeros(1024, dtype=torch.complex64), pa.uint64()),
        (torch.frombuffer(bytearray(70), dtype=torch.int32, offset=2, count=16), pa.uint16()),  # unaligned
    ],
    ids=[
        "float32",
        "float16x3",
        "int64",
        "offset-by-4",
        "uint8",
        "uint8-odd",
        "bool",
        "bfloat16",
        "complex64",
        "int32-at-2",
    ],
)
def test_send_hands_dora_the_leafs_own_type_or_the_widest_unit_that_tiles_the_bytes(monkeypatch, tensor, unit):
    node = FakeNode()
    handed = []
    real = FakeNode.send_output
    monkeypatch.setattr(node, "send_output", lambda o, data, m=None: handed.append(data) or real(node, o, data, m))
    tc.send(node, "out", tensor)
    tc.send(node, "out", tensor)  # the repeat too
    assert [v.type for v in handed] == [unit, unit]
    assert_identical(tc.receive(as_event(node.sent[1])), tensor)
