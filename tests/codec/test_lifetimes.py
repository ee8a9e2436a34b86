"""Received zero-copy objects: kept or released as one unit (failure mode 4); in-place writes
into shared views detected by the version counter (failure mode 5)."""

from __future__ import annotations

import collections
import gc
import logging
import re
import threading

import pyarrow as pa
import pytest
import torch
from torchvision import tv_tensors as tvt

import tensor_codec as tc
from tensor_codec.lifetimes import is_borrowed
from tensor_codec.testing import assert_identical, make_packed_sequences
from tests.support.calls import with_c_calls_named
from tests.support.waiting import wait_until


def big_sample(seed: int = 0) -> dict:
    """A structure big enough to be decoded zero-copy (> 4 KiB)."""
    g = torch.Generator().manual_seed(seed)
    return {
        "image": tvt.Image(torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=g)),
        "boxes": tvt.BoundingBoxes(torch.rand(256, 4, generator=g), format="XYXY", canvas_size=(32, 32)),
        "features": torch.randn(64, 64, generator=g).t(),
    }


def event(obj, input_id="frames"):
    value, metadata = tc.encode(obj)
    return {"type": "INPUT", "id": input_id, "value": value, "metadata": {**metadata, "timestamp": 0}}


def test_received_views_are_tracked_and_released_together_at_scope_exit():
    sample = big_sample()
    with tc.scope():
        obj = tc.receive(event(sample))
        assert all(is_borrowed(t) for t in obj.values())
        assert_identical(obj, sample)
    for t in obj.values():
        assert t.numel() == 0  # detached from the shared memory
        assert not is_borrowed(t)


def test_keep_copies_a_structure_out_as_one_unit():
    sample = big_sample()
    with tc.scope():
        kept = tc.keep(tc.receive(event(sample)))
    assert_identical(kept, sample)
    assert_identical(kept, sample, strides="exact")  # strides exactly as received
    blocks = {t.untyped_storage().data_ptr() for t in kept.values()}
    assert len(blocks) == 1  # one owned block for the whole message
    assert not any(is_borrowed(t) for t in kept.values())


def test_keep_of_a_packed_sequence_keeps_every_part_valid_after_release():
    big = torch.nn.utils.rnn.pack_sequence([torch.randn(n, 64) for n in (30, 20, 10)], enforce_sorted=False)
    with tc.scope():
        kept = tc.keep(tc.receive(event({"seq": big})))
    gc.collect()
    assert_identical(kept["seq"], big)
    padded, lengths = torch.nn.utils.rnn.pad_packed_sequence(kept["seq"])
    assert lengths.tolist() == [30, 20, 10]


def test_a_write_into_a_received_view_is_reported_with_input_and_path():
    with pytest.raises(tc.SharedViewWriteError) as info:
        with tc.scope():
            obj = tc.receive(event(big_sample(), "detections"))
            obj["boxes"].mul_(2)
    message = str(info.value)
    assert "input 'detections'" in message and "`$.boxes`" in message
    assert re.search(r"version (\d+) -> (\d+)", message)


def test_a_write_through_a_derived_view_is_detected():
    with pytest.raises(tc.SharedViewWriteError, match=r"\$\.features"):
        with tc.scope():
            obj = tc.receive(event(big_sample()))
            obj["features"][0, :4].zero_()


def test_a_write_then_drop_inside_the_scope_is_still_detected():
    with pytest.raises(tc.SharedViewWriteError, match=r"\$\.image"):
        with tc.scope():
            obj = tc.receive(event(big_sample()))
            obj["image"].add_(1)
            del obj


def test_reading_and_computing_is_not_a_write():
    with tc.scope():
        obj = tc.receive(event(big_sample()))
        _ = (obj["features"] * 2).sum() + obj["boxes"].mean()
        _ = obj["features"].contiguous().add_(1)  # a copy: fine


def test_release_releases_every_part_of_the_message_even_ones_not_passed():
    obj = tc.receive(event(big_sample()))
    tc.release(obj["boxes"])
    assert all(t.numel() == 0 for t in obj.values())


def test_release_outside_a_scope_reports_writes():
    obj = tc.receive(event(big_sample(), "cam"))
    obj["features"].add_(1)
    with pytest.raises(tc.SharedViewWriteError, match="input 'cam'"):
        tc.release(obj)


def test_keep_after_release_is_an_error():
    with tc.scope():
        obj = tc.receive(event(big_sample(), "cam"))
    with pytest.raises(tc.ReleasedError, match="input 'cam'"):
        tc.keep(obj)


def test_an_exception_in_the_scope_is_not_masked_by_a_write_report(caplog):
    with caplog.at_level(logging.ERROR, logger="tensor_codec"):
        with pytest.raises(KeyError):
            with tc.scope():
                obj = tc.receive(event(big_sample()))
                obj["image"].add_(1)
                raise KeyError("boom")
    assert "zero-copy view was written" in caplog.text


def test_copied_and_small_messages_are_owned_and_writable():
    with tc.scope():
        owned = tc.receive(event(big_sample()), copy=True)
        small = tc.receive(event(torch.zeros(4)))
        owned["features"].add_(1)
        small.add_(1)
    assert owned["features"].numel() == 64 * 64 and small.tolist() == [1.0] * 4


def test_nested_scopes_release_their_own_messages():
    with tc.scope():
        outer = tc.receive(event(big_sample()))
        with tc.scope():
            inner = tc.receive(event(big_sample(1)))
        assert inner["features"].numel() == 0
        assert outer["features"].numel() == 64 * 64
    assert outer["features"].numel() == 0


def test_scopes_are_per_thread():
    results = {}

    def worker():
        with tc.scope():
            results["obj"] = tc.receive(event(big_sample()))

    with tc.scope():
        mine = tc.receive(event(big_sample()))
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert results["obj"]["features"].numel() == 0  # released by the thread's own scope
        assert mine["features"].numel() == 64 * 64


def test_a_thread_outside_any_scope_finds_an_empty_stack_and_its_receives_stay_out_of_others_scopes():
    """Every thread has its stack of scopes from its first use, empty (the structure read
    directly: a receive outside any scope reads it as a list, where a missing attribute was
    looked up and missed per message); such a receive still registers its message (tc.release
    works) and joins no scope of another thread's."""
    from tensor_codec import lifetimes

    seen = {}

    def worker():
        seen["stack"] = list(lifetimes._local.scopes)
        obj = tc.receive(event(big_sample()))
        seen["borrowed"] = is_borrowed(obj["features"])
        tc.release(obj)
        seen["released"] = obj["features"].numel() == 0

    with tc.scope() as mine:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert mine._messages == []  # the thread's message is not the main thread's scope's
    assert seen == {"stack": [], "borrowed": True, "released": True}
    assert lifetimes._local.scopes == []  # this thread's stack, empty again once its scope ended


def _wait_for_arrow_allocations_back_to(baseline: int) -> None:
    """Dropped buffers come back once the collector has run (whichever thread runs it)."""
    wait_until(
        lambda: (gc.collect(), pa.total_allocated_bytes() - baseline)[1],
        lambda grown: grown < 4 << 20,
        describe="Arrow's allocations to come back within 4 MiB of where they were (bytes above it observed)",
    )


def test_memory_stays_bounded_over_a_long_stream_even_if_results_are_retained():
    """Releasing detaches every part, so a stream whose results are (accidentally) retained
    does not pin one message's memory per iteration."""
    payload = {"frame": torch.randn(256, 1024)}  # 1 MiB
    gc.collect()
    baseline = pa.total_allocated_bytes()
    retained = []
    for _ in range(200):
        value, metadata = tc.encode(payload)
        with tc.scope():
            obj = tc.decode(value, metadata, name="frame")
            assert obj["frame"].shape == (256, 1024)
            retained.append(obj)
        del value, metadata, obj
    # Not 200 MiB. Dropped buffers come back once the collector has run (whichever thread runs it).
    _wait_for_arrow_allocations_back_to(baseline)


@pytest.mark.parametrize("unit", [pa.float32(), pa.uint64(), pa.uint8()], ids=str)
def test_a_released_one_leaf_message_holds_nothing_whatever_type_its_value_has(unit):
    """One leaf, the value typed as the leaf (what tc.send hands dora for a float32 tensor: the
    leaf is DLPack's own tensor, shaped in place) or in other units (the leaf views DLPack's
    storage): either way the leaf is no view of another tensor, so once released a retained leaf
    pins nothing, and keep() copies it exactly."""
    frame = torch.randn(1024, 256).t()  # 1 MiB, transposed
    gc.collect()
    baseline = pa.total_allocated_bytes()
    retained = []
    for i in range(100):
        value, metadata = tc.encode(frame)
        width = unit.bit_width // 8
        value = pa.Array.from_buffers(unit, len(value) // width, [None, value.buffers()[1]])
        with tc.scope():
            got = tc.decode(value, metadata, name="frame")
            assert got._base is None and is_borrowed(got)
            if i == 0:
                kept = tc.keep(got)
            retained.append(got)
        del value, metadata, got
    assert_identical(kept, frame, strides="exact")
    assert all(t.numel() == 0 for t in retained)
    _wait_for_arrow_allocations_back_to(baseline)


def test_bytes_torch_will_not_retype_in_place_take_the_full_way(monkeypatch):
    """A UInt8 value's leaf is its DLPack tensor retyped (a dtype view: no `_base`). Where torch
    refused that view, the message goes the full way (materialize: the leaf set onto DLPack's
    storage): the same exact, borrowed leaf, released at scope exit."""
    frame = torch.randn(64, 32)
    value, metadata = tc.encode(frame)  # a UInt8 value
    real_view = torch.Tensor.view
    refused = []

    def view(self, *args):
        if len(args) == 1 and isinstance(args[0], torch.dtype):
            refused.append(args[0])
            raise RuntimeError("refused for the test")
        return real_view(self, *args)

    for _ in range(2):
        with tc.scope():
            with monkeypatch.context() as patched:  # torch refuses while the message is decoded
                patched.setattr(torch.Tensor, "view", view)
                got = tc.decode(value, metadata, name="frame")
            assert is_borrowed(got) and got._base is None
            assert_identical(got, frame, strides="exact")
        assert got.numel() == 0
    assert refused  # the retyping was asked for, and refused


@pytest.mark.parametrize("kind", ["Image", "BoundingBoxes", "Image in a dict"])
def test_a_released_tvtensor_holds_nothing_of_its_message(kind):
    """A TVTensor handed out is no autograd view of the plain leaf it was made from (no `_base`,
    which releasing would leave holding the message's memory): a stream whose released TVTensors
    are retained pins nothing, whichever path built them (the first message's, the one step of
    a stream's Image, a dict's)."""
    if kind == "BoundingBoxes":
        obj = tvt.BoundingBoxes(torch.rand(65536, 4) * 64, format="XYXY", canvas_size=(64, 64))  # 1 MiB
    else:
        obj = tvt.Image(torch.randn(4, 256, 256))  # 1 MiB
        if kind == "Image in a dict":
            obj = {"frame": obj}
    gc.collect()
    baseline = pa.total_allocated_bytes()
    retained = []
    for _ in range(60):
        value, metadata = tc.encode(obj)
        with tc.scope():
            got = tc.decode(value, metadata, name="frames")
            leaf = got["frame"] if isinstance(got, dict) else got
            with torch._C.DisableTorchFunctionSubclass():
                assert leaf._base is None
            retained.append(got)
        del value, metadata, got, leaf
    _wait_for_arrow_allocations_back_to(baseline)


def test_packed_sequence_released_as_one_unit():
    packed = torch.nn.utils.rnn.pack_sequence([torch.randn(40, 32), torch.randn(25, 32)])
    with tc.scope():
        got = tc.receive(event(packed))
        assert got.data.shape == packed.data.shape
    assert got.data.numel() == 0 and got.batch_sizes.numel() == 0


def test_small_packed_sequences_are_plain_owned_values():
    packed = make_packed_sequences()["packed_unsorted"]
    with tc.scope():
        got = tc.receive(event(packed))
    assert_identical(got, packed)  # < 4 KiB: copied, so nothing to release


def test_concurrent_encode_decode_from_several_threads_is_exact():
    """The header, plan and metadata caches and the lifetime registry are shared by threads."""
    errors = []

    def worker(seed: int):
        try:
            for i in range(150):
                shape = (8 + (seed + i) % 5, 64)  # a few layouts per thread, shared across threads
                obj = {"x": torch.full(shape, float(seed * 1000 + i)).t(), "boxes": big_sample(seed)["boxes"]}
                with tc.scope():
                    got = tc.receive(event(obj, f"t{seed}"))
                    assert_identical(got, obj)
                    kept = tc.keep(got)
                assert_identical(kept, obj)
        except Exception as e:  # surfaced below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_keep_racing_release_never_returns_released_memory():
    """Review finding: keep() in one thread and release() in another once produced empty tensors."""
    outcomes = collections.Counter()
    for _ in range(300):
        obj = tc.receive(event({"a": torch.randn(64, 32), "b": torch.randn(2048)}))
        result = {}

        def keeper(obj=obj, result=result):  # run and joined within this iteration
            try:
                result["kept"] = tc.keep(obj)
            except tc.ReleasedError:
                result["kept"] = None

        thread = threading.Thread(target=keeper)
        thread.start()
        tc.release(obj)
        thread.join()
        kept = result["kept"]
        if kept is None:
            outcomes["released first"] += 1
        else:
            assert kept["a"].shape == (64, 32) and kept["b"].shape == (2048,)
            outcomes["kept first"] += 1
    assert sum(outcomes.values()) == 300


# ---------------------------------------------------------------------------- a stream of one tensor


def _as_float32(value: pa.Array) -> pa.Array:
    """The same bytes typed as float32: the value tc.send hands dora for a float32 tensor."""
    return pa.Array.from_buffers(pa.float32(), len(value) // 4, [None, value.buffers()[1]])


def _counting(monkeypatch, module, name, counts):
    real = getattr(module, name)

    def call(*args, **kwargs):
        counts[name] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, call)


@pytest.mark.parametrize("typed", [True, False], ids=["typed-as-leaf", "uint8"])
def test_a_stream_of_one_tensor_is_viewed_in_one_step_from_its_first_message(monkeypatch, typed):
    """The steady state of a receiving stream (structural: counted, not timed): its header is
    compiled once, with its first message, and no message of one plain tensor is materialized by
    the transport or built as a tree; each is viewed where it lies and registered in one step
    (received.Compiled.view), the first too. Each is still a borrowed view with this message's bytes,
    released at scope exit, checked for writes, kept exactly."""
    from tensor_codec import lifetimes, received
    from tensor_codec.transports.host import HostTransport

    counts = collections.Counter()
    _counting(monkeypatch, received, "compile_header", counts)
    _counting(monkeypatch, HostTransport, "materialize", counts)
    _counting(monkeypatch, lifetimes, "register_message", counts)
    _counting(monkeypatch, lifetimes, "register_leaf", counts)
    received.forget_all()
    frames = [torch.randn(256, 64, generator=torch.Generator().manual_seed(i)).t() for i in range(5)]
    for i, frame in enumerate(frames):
        value, metadata = tc.encode(frame)
        if typed:
            value = _as_float32(value)
        with tc.scope():
            got = tc.decode(value, metadata, name="frames")
            assert is_borrowed(got) and got._base is None
            assert_identical(got, frame, strides="exact")
            if i == 3:
                kept = tc.keep(got)
        assert got.numel() == 0  # released: detached from the message's memory
    assert counts == {"compile_header": 1, "register_leaf": 5}
    assert_identical(kept, frames[3], strides="exact")
    assert not is_borrowed(kept)
    value, metadata = tc.encode(frames[0])
    with pytest.raises(tc.SharedViewWriteError, match="input 'frames'"):
        with tc.scope():
            tc.decode(value, metadata, name="frames").add_(1)


@pytest.mark.parametrize("cls", [tvt.Image, tvt.Video, tvt.Mask], ids=lambda c: c.__name__)
def test_a_stream_of_one_attributeless_tvtensor_is_viewed_in_one_step_too(monkeypatch, cls):
    """Image, Video and Mask carry no attributes: a message of one is viewed and registered in
    one step as a plain tensor's is (its header compiled once), and handed out as its class: the
    tensor DLPack made, its class set in place, no second tensor object made over it (that cost
    a dora node 15 to 20 us a message, wire.kinds.retypes_in_place). Borrowed, released at scope
    exit (writes through it reported), kept exactly, as its class."""
    from tensor_codec import lifetimes, received
    from tensor_codec.transports.host import HostTransport

    counts = collections.Counter()
    _counting(monkeypatch, received, "compile_header", counts)
    _counting(monkeypatch, HostTransport, "materialize", counts)
    _counting(monkeypatch, lifetimes, "register_message", counts)
    _counting(monkeypatch, lifetimes, "register_leaf", counts)
    received.forget_all()
    shape = (2, 3, 32, 48) if cls is tvt.Video else (3, 32, 48) if cls is tvt.Image else (64, 96)  # over 4 KiB: viewed
    frames = [
        cls(torch.randint(0, 255, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(i)))
        for i in range(5)
    ]
    for i, frame in enumerate(frames):
        value, metadata = tc.encode(frame)
        with tc.scope():
            got, made = with_c_calls_named("_make_subclass", tc.decode, value, metadata, name="frames")
            assert made == 0  # however reached: torch's own call counted
            assert type(got) is cls and is_borrowed(got) and got._base is None
            assert got.data_ptr() == value.buffers()[1].address  # the message's bytes, where they lie
            assert type(got + 0) is torch.Tensor  # a TVTensor's operations unwrap, as torchvision's do
            assert_identical(got, frame, strides="exact")
            if i == 3:
                kept = tc.keep(got)
        assert got.as_subclass(torch.Tensor).numel() == 0  # released: detached from the message's memory
    assert counts == {"compile_header": 1, "register_leaf": 5}
    assert type(kept) is cls and not is_borrowed(kept)
    assert_identical(kept, frames[3], strides="exact")
    value, metadata = tc.encode(frames[0])
    with pytest.raises(tc.SharedViewWriteError, match="input 'frames'"):
        with tc.scope():
            tc.decode(value, metadata, name="frames").add_(1)


class _OwnDispatch(torch.Tensor):
    """A tensor subclass with a __torch_dispatch__ of its own: torch sets up its dispatch when it
    makes an object, so a tensor cannot just become one."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _Slotted(torch.Tensor):
    __slots__ = ("extra",)  # another memory layout: Python will not swap a tensor's class to it


def test_which_classes_a_received_tensor_becomes_in_place():
    """wire.kinds.retypes_in_place: the attribute-less TVTensors yes; torch.Tensor itself (nothing
    to set), a class with its own __torch_dispatch__, one Python will not swap to, and what is no
    tensor class, no."""
    from tensor_codec.wire.kinds import retypes_in_place

    assert all(retypes_in_place(cls) for cls in (tvt.Image, tvt.Video, tvt.Mask))
    assert not any(retypes_in_place(cls) for cls in (torch.Tensor, _OwnDispatch, _Slotted, dict, int))


def test_a_class_a_tensor_cannot_become_in_place_is_made_over_it_by_the_full_path(monkeypatch):
    """Were Image one of the classes a tensor cannot become in place, its messages would still
    arrive as Images, zero-copy, each made over the viewed tensor (by the full path)."""
    from tensor_codec import received
    from tensor_codec.wire import kinds

    monkeypatch.setattr(kinds, "retypes_in_place", lambda cls: False)
    counts = collections.Counter()
    _counting(monkeypatch, kinds, "MAKE_SUBCLASS", counts)
    received.forget_all()
    frame = tvt.Image(torch.randint(0, 255, (3, 32, 48), dtype=torch.uint8))
    for _ in range(3):
        value, metadata = tc.encode(frame)
        with tc.scope():
            got = tc.decode(value, metadata)
            assert type(got) is tvt.Image and is_borrowed(got)
            assert_identical(got, frame, strides="exact")
    assert counts == {"MAKE_SUBCLASS": 3}
    received.forget_all()  # no header compiled under the stand-in stays cached


def test_a_tvtensor_with_attributes_or_grad_is_built_not_viewed_in_one_step(monkeypatch):
    """BoundingBoxes carry attributes and a tensor requiring grad its flag: their object is
    built every time (no one-step view), and arrives whole."""
    from tensor_codec import lifetimes, received

    counts = collections.Counter()
    _counting(monkeypatch, lifetimes, "register_leaf", counts)
    received.forget_all()
    boxes = tvt.BoundingBoxes(torch.rand(2048, 4) * 64, format="XYXY", canvas_size=(64, 64))
    graded = torch.randn(64, 64, requires_grad=True)
    for obj in (boxes, boxes, graded, graded):
        value, metadata = tc.encode(obj)
        with tc.scope():
            assert_identical(tc.decode(value, metadata), obj)
    assert counts == {}


@pytest.mark.parametrize("how", ["decode", "receive"])
def test_a_seen_header_beside_version_1s_key_or_without_a_dict_is_refused_not_viewed(how):
    """The one-step view reads the header text from the metadata alone, and a stray tc.version
    beside a header it has seen must not slip past the check the full path makes: refused and
    named, as the first message would be. So are metadata that is not a dict and a header that is
    not a string."""
    from tensor_codec import received

    frame = torch.randn(64, 64)
    value, metadata = tc.encode(frame)
    received.forget_all()
    tc.release(tc.decode(value, metadata))  # the header is seen: one-step views take the next ones

    def decode(value, metadata):
        if how == "decode":
            return tc.decode(value, metadata)
        return tc.receive({"type": "INPUT", "id": "frames", "value": value, "metadata": metadata})

    with pytest.raises(tc.DecodeError, match="tc.version: expected no such key .* got 1: the sender writes an older"):
        decode(value, {**metadata, "tc.version": 1})
    with pytest.raises(tc.DecodeError, match="metadata: expected a dict, got list"):
        decode(value, list(metadata.items()))
    with pytest.raises(tc.DecodeError, match="tc.header: expected a JSON string, got bytes"):
        decode(value, {"tc.header": metadata["tc.header"].encode()})
    with tc.scope():
        assert is_borrowed(decode(value, metadata))


def test_a_seen_header_with_a_wrong_value_is_refused_as_the_first_message_would_be():
    """The one-step view takes only a value that is exactly what the header describes; any other
    goes the full way, which names what is wrong (or copies what it cannot view in place)."""
    from tensor_codec import received

    frame = torch.randn(64, 64)
    value, metadata = tc.encode(frame)
    received.forget_all()
    tc.decode(value, metadata)  # the header is seen: the next messages may take the shortcut
    data = value.buffers()[1]
    short = pa.Array.from_buffers(pa.uint8(), len(value) - 8, [None, data])
    with pytest.raises(tc.DecodeError, match="value: expected 16384 bytes"):
        tc.decode(short, metadata)
    nulls = pa.array([1] * 4095 + [None], pa.float32())
    with pytest.raises(tc.DecodeError, match="value: expected no nulls, got 1"):
        tc.decode(nulls, metadata)
    with pytest.raises(tc.DecodeError, match="value: expected Arrow type"):
        tc.decode(pa.array(["x"] * 16384), metadata)
    # Bytes one past an aligned address: not viewable in place, so copied, exactly.
    shifted = pa.py_buffer(b"\0" + value.buffers()[1].to_pybytes())
    unaligned = pa.Array.from_buffers(pa.uint8(), len(value), [None, shifted], offset=1)
    with tc.scope():
        got = tc.decode(unaligned, metadata)
        assert_identical(got, frame)
        assert not is_borrowed(got)
    got = tc.decode(value, metadata, copy=True)  # an owned tensor, never the borrowed view
    assert_identical(got, frame)
    assert not is_borrowed(got)
    with tc.scope():  # host bytes onto "cpu": where they are, viewed by the full path
        got = tc.decode(value, metadata, device="cpu")
        assert_identical(got, frame)
        assert is_borrowed(got)
