"""The CUDA IPC transport's protocol on any machine: a CPU stand-in for the device operations
(tests/support/ipc_fake_backend.py) drives the real transport, ledger, caps, handle cache and lifetimes.
What only a GPU can show (real handles, events, streams, two processes) is in test_ipc_gpu.py."""

from __future__ import annotations

import base64
import gc
import logging

import pyarrow as pa
import pytest
import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec import gpus
from tensor_codec.cuda_ipc import identity
from tensor_codec.cuda_ipc import transport as cuda_ipc
from tensor_codec.dora import Link
from tensor_codec.testing import (
    assert_identical,
    make_dtype_cases,
    make_layout_cases,
    make_many_small,
    make_packed_sequences,
    make_tvtensor_cases,
)
from tensor_codec.transports import ENCODE_OUTPUT
from tensor_codec.wire.cuda_ipc import ProducerIdentity
from tests.support.fakes import FakeNode
from tests.support.waiting import wait_until
from tests.support.wire import transport_of


def roundtrip(obj, **kw):
    value, metadata = tc.encode(obj, transport="cuda-ipc")
    return tc.decode(value, metadata, **kw), value, metadata


def live_bytes(output: str = ENCODE_OUTPUT) -> int:
    return cuda_ipc._get_state().producer.output(output).live_bytes


def _step() -> dict:
    """Move releases along once: dropped views die (their finalizers queue a release), the
    receiver gives back what its markers allow (its own thread may be doing it too), the producer
    collects finished slots. -> what is in flight now."""
    gc.collect()
    state = cuda_ipc._get_state()
    state.receiver.poll()
    state.producer.collect()
    return {
        "live_bytes": {name: out.live_bytes for name, out in state.producer.outputs.items()},
        "receiver": state.receiver.stats(),
        # Markers are pooled: one object can stand for several recordings.
        "markers_done": [m.done for m in {id(m): m for m in getattr(state.backend, "markers", [])}.values()],
    }


def wait_live_bytes(expected: int, output: str = ENCODE_OUTPUT) -> None:
    """Wait (with a deadline) until the producer's bytes in flight on `output` are `expected`:
    releases go through a finalizer, the receiver's release thread and the ledger, so reading
    them once, right after a release, races that thread on a busy machine."""
    wait_until(
        _step,
        lambda seen: seen["live_bytes"].get(output, 0) == expected,
        describe=f"output {output!r} to have {expected} bytes in flight",
    )


def drain() -> None:
    """Give every release that can happen the chance to (until the receiver has nothing left to
    give back but what waits on a marker the test holds): before asserting what is still held."""
    wait_until(
        _step,
        lambda seen: seen["receiver"]["pending_release"] == len([d for d in seen["markers_done"] if not d]),
        describe="the receiver to give back every message whose views died and whose marker completed",
    )


# ---------------------------------------------------------------------------------- right bytes


def test_stacked_0_to_11_arrives_whole(fake):
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = torch.arange(6, 12, dtype=torch.float32).reshape(2, 3)
    got, value, metadata = roundtrip(torch.stack([a, b]))
    assert len(value) == 0  # the bytes never travel through the host
    assert got.tolist() == torch.arange(12, dtype=torch.float32).reshape(2, 2, 3).tolist()
    assert transport_of(metadata) == "cuda-ipc"
    assert metadata["tc.ipc.offset"] % 512 == 0


@pytest.mark.parametrize("name", sorted(make_layout_cases()))
def test_every_layout_bit_exact(fake, name):
    t = make_layout_cases()[name]
    got, _, _ = roundtrip({"t": t, "pad": torch.ones(3, dtype=torch.uint8)})
    assert_identical(got["t"], t)


def test_every_dtype_bit_exact_in_one_message(fake):
    cases = make_dtype_cases()
    got, _, metadata = roundtrip(cases)
    assert_identical(got, cases)
    offsets = [leaf["offset"] for leaf in __import__("json").loads(metadata["tc.header"])["leaves"]]
    assert all(o % cuda_ipc.ALIGNMENT == 0 for o in offsets)


def test_tvtensors_and_packed_sequences_keep_type_and_attributes(fake):
    obj = {"tv": make_tvtensor_cases(), "packed": make_packed_sequences()}
    got, _, _ = roundtrip(obj)
    assert_identical(got, obj)
    for packed in got["packed"].values():
        assert packed.batch_sizes.device.type == "cpu"


def test_hundreds_of_small_tensors_one_by_one_from_shared_segments(fake):
    small = make_many_small(300)
    received = []
    for t in small:
        got, _, _ = roundtrip(t)
        received.append(got.clone())
        del got
    for got, t in zip(received, small):
        assert_identical(got, t)
    # Many messages share a segment (as in torch's caching allocator), each at its own offset;
    # the receiver opened each segment once.
    assert len(set(fake.opened)) == len(fake.opened) < 300


def test_padding_is_zeroed(fake):
    _, _, metadata = roundtrip([torch.ones(3, dtype=torch.uint8), torch.ones(3, dtype=torch.uint8)])
    handle = base64.b64decode(metadata["tc.ipc.handle"])
    start = metadata["tc.ipc.offset"]
    segment = fake.segments[handle]
    assert segment[start + 3 : start + cuda_ipc.ALIGNMENT].eq(0).all()


def test_writing_after_send_never_changes_what_was_received(fake):
    t = torch.arange(1000, dtype=torch.int32)
    value, metadata = tc.encode(t, transport="cuda-ipc")
    t.fill_(-1)
    assert tc.decode(value, metadata).tolist() == list(range(1000))


def test_each_message_waits_on_its_own_event(fake):
    held = [roundtrip(torch.full((4,), i))[0] for i in range(3)]  # three in flight at once
    assert fake.events_waited == fake.events_recorded
    assert len(set(fake.events_recorded)) == 3  # each in its own buffer, with its own event
    del held
    wait_live_bytes(0)
    roundtrip(torch.full((4,), 9))
    # Released messages' buffers (and events) are reused: recorded again, waited on again.
    assert fake.events_waited == fake.events_recorded
    assert fake.events_recorded[-1] in fake.events_recorded[:3]


# ---------------------------------------------------------------------------------- lifetimes


def test_memory_returns_to_the_producer_only_after_the_receiver_is_done(fake):
    got, _, _ = roundtrip(torch.zeros(1000))
    drain()
    assert live_bytes() == 4000  # the receiver still holds it
    view = got[10:20]  # a view the user derived keeps it in use too
    del got
    drain()
    assert live_bytes() == 4000
    assert fake.markers == []  # no release even began: the view holds the message
    del view
    wait_live_bytes(0)


def test_release_waits_for_the_receivers_gpu_work(fake):
    fake.markers_done = False  # the test completes the marker, below: nothing else can
    got, _, _ = roundtrip(torch.zeros(100))
    tc.release(got)
    del got
    # The release reached the receiver: its marker is recorded and the receiver waits on it.
    (marker,) = wait_until(lambda: (gc.collect(), list(fake.markers))[1], describe="the release to record its marker")
    drain()
    assert live_bytes() == 400  # marker not reached yet: the GPU may still read it
    assert cuda_ipc._get_state().receiver.stats()["pending_release"] == 1
    marker.done = True
    wait_live_bytes(0)


def test_scope_releases_and_catches_writes_into_shared_views(fake):
    value, metadata = tc.encode(torch.zeros(10), transport="cuda-ipc")
    with pytest.raises(tc.SharedViewWriteError, match=r"\$.*written in place"):
        with tc.scope():
            got = tc.decode(value, metadata, name="frames")
            got.add_(1)
    assert got.numel() == 0  # detached at release
    del got
    wait_live_bytes(0)


def test_keep_copies_a_structure_out_as_one_unit(fake):
    packed = make_packed_sequences()
    with tc.scope():
        got, _, _ = roundtrip(packed)
        kept = tc.keep(got)
    del got
    wait_live_bytes(0)
    assert_identical(kept, packed)


def test_copy_out_to_host_releases_at_once(fake):
    got, _, _ = roundtrip({"a": torch.arange(10)}, device="cpu")
    wait_live_bytes(0)  # nothing of the message is referenced: no tc.release, no scope needed
    assert got["a"].tolist() == list(range(10))


# ---------------------------------------------------------------------------------- caps


def test_a_message_dora_lost_on_the_way_is_taken_back_and_counted(fake):
    """Three messages, the receiver gets the first and the third (dora dropped the second: it
    delivers an input's messages in order, so the third says the second will never come). The
    second's memory is taken back at once and counted per output (`lost_on_the_way`): what the
    H100 run of issue 37 could not tell of a probe that got 279 of 300 messages."""
    node = FakeNode(descriptor={})
    cuda_ipc._get_state().producer.ledger.claim_timeout_ns = 1 << 62  # order alone must tell
    for i in range(3):
        assert tc.send(node, "lossy", torch.full((1000,), float(i)), transport="cuda-ipc")
    got = [tc.decode(pa.array([], type=pa.uint8()), node.sent[i][2]) for i in (0, 2)]
    assert [g[0].item() for g in got] == [0.0, 2.0]
    del got
    wait_live_bytes(0, "lossy")
    stats = tc.ipc_stats()["outputs"]["lossy"]
    assert stats["lost_on_the_way"] == 1 and stats["dropped"] == 0 and stats["sent"] == 3


def test_cap_drop_policy_drops_and_counts_then_recovers(fake):
    node = FakeNode(descriptor={})
    # Unclaimed messages stay in flight for the whole test, however slowly it runs.
    cuda_ipc._get_state().producer.ledger.claim_timeout_ns = 1 << 62
    tc.ipc_configure("out", max_bytes_in_flight=10_000, on_full="drop")
    assert tc.send(node, "out", torch.zeros(1000), transport="cuda-ipc")  # 4000 bytes
    assert tc.send(node, "out", torch.zeros(1000), transport="cuda-ipc")  # 8000
    assert not tc.send(node, "out", torch.zeros(1000), transport="cuda-ipc")  # would be 12000
    stats = tc.ipc_stats()["outputs"]["out"]
    assert stats["dropped"] == 1 and stats["bytes_in_flight"] == 8000 and stats["peak_bytes_in_flight"] <= 10_000
    got = tc.decode(pa.array([], type=pa.uint8()), node.sent[0][2])  # (output id, value, metadata)
    del got
    wait_live_bytes(4000, "out")  # the first one given back
    assert tc.send(node, "out", torch.zeros(1000), transport="cuda-ipc")
    with pytest.raises(tc.InFlightLimitError, match="can never fit"):
        tc.send(node, "out", torch.zeros(3000), transport="cuda-ipc")


def test_cap_wait_policy_times_out_with_a_clear_error(fake):
    cuda_ipc._get_state().producer.ledger.claim_timeout_ns = 1 << 62  # the first one is never reclaimed
    tc.ipc_configure(ENCODE_OUTPUT, max_bytes_in_flight=5000, on_full="wait", timeout_s=0.05)
    tc.encode(torch.zeros(1000), transport="cuda-ipc")
    with pytest.raises(tc.InFlightLimitError, match="still in flight after waiting"):
        tc.encode(torch.zeros(1000), transport="cuda-ipc")


def test_unclaimed_messages_are_reclaimed_after_the_claim_timeout(fake):
    state = cuda_ipc._get_state()
    state.producer.ledger.claim_timeout_ns = 0
    value, metadata = tc.encode(torch.zeros(100), transport="cuda-ipc")
    wait_live_bytes(0)
    with pytest.raises(tc.DecodeError, match=r"tc\.ipc\.slot: message expired"):
        tc.decode(value, metadata)


def test_a_message_is_claimed_before_the_receiver_starts_cuda(fake, monkeypatch):
    """A process's first message finds its GPU, which starts CUDA: seconds on a loaded host, in
    which the producer keeps collecting. The message is claimed first, so it is not taken back
    meanwhile (the GPU host's slow-receiver run lost its first message so, 1 of 40)."""
    state = cuda_ipc._get_state()
    state.producer.ledger.claim_timeout_ns = 0  # the producer gives up on the first look
    value, metadata = tc.encode(torch.arange(100), transport="cuda-ipc")
    finding_the_gpu = fake.local_index

    def slow_start(uuid):
        state.producer.collect()  # the producer, while this process starts CUDA
        return finding_the_gpu(uuid)

    monkeypatch.setattr(fake, "local_index", slow_start)
    gpus.current().index_of_uuid.clear()
    got = tc.decode(value, metadata)
    assert got.tolist() == list(range(100))


def test_a_failed_send_frees_its_slot_at_once(fake):
    with pytest.raises(RuntimeError, match="daemon gone"):
        tc.send(FakeNode(descriptor={}, fail="daemon gone"), "x", torch.zeros(10), transport="cuda-ipc")
    assert tc.ipc_stats()["outputs"]["x"]["bytes_in_flight"] == 0


def test_expected_receivers_come_from_the_dataflow(monkeypatch):
    node = FakeNode(
        node_id="cam",
        descriptor={
            "nodes": [
                {"id": "cam", "outputs": ["image"]},
                {"id": "a", "inputs": {"x": "cam/image", "y": "cam/other"}},
                {"id": "b", "inputs": {"img": {"source": "cam/image", "queue_size": 1}}},
            ]
        },
    )
    assert Link.of(node).output("image").receivers() == 2
    assert Link.of(node).output("none").receivers() == 1


# ---------------------------------------------------------------------------------- hostile input


def _message(fake):
    value, metadata = tc.encode(torch.arange(8), transport="cuda-ipc")
    return value, metadata


@pytest.mark.parametrize(
    "key,bad,match",
    [
        ("tc.ipc.handle", "not base64!", "tc.ipc.handle: expected base64"),
        ("tc.ipc.handle", base64.b64encode(b"xy").decode(), r"tc.ipc.handle: expected 3\.\."),
        ("tc.ipc.handle", base64.b64encode(b"\x01z" + bytes(64)).decode(), "tc.ipc.handle: expected a 64-byte"),
        ("tc.ipc.handle", base64.b64encode(b"\x01c" + bytes(64)).decode(), "tc.ipc.handle: could not open"),
        ("tc.ipc.offset", -1, r"tc.ipc.offset: expected an integer"),
        ("tc.ipc.offset", 1 << 40, r"tc.ipc.offset: expected the message inside the producer's segment"),
        ("tc.ipc.offset", 8, r"tc.ipc.offset: expected a multiple of 256"),  # its leaves would be misaligned
        ("tc.ipc.size", 4096, "tc.ipc.size: expected 64 bytes"),
        ("tc.ipc.event", base64.b64encode(bytes(10)).decode(), r"tc.ipc.event: expected 64\.\.64 bytes, got 10"),
        ("tc.ipc.slot", 70000, "tc.ipc.slot: expected an integer"),
        ("tc.ipc.generation", 0, "tc.ipc.generation: expected an integer"),
        ("tc.ipc.generation", 99, r"tc.ipc.slot: message expired"),
        ("tc.ipc.slot", "1", "tc.ipc.slot: expected an integer"),
    ],
)
def test_hostile_ipc_fields_are_refused_naming_the_field(fake, key, bad, match):
    value, metadata = _message(fake)
    metadata[key] = bad
    with pytest.raises(tc.DecodeError, match=match):
        tc.decode(value, metadata)
    drain()


def test_a_receive_interrupted_after_its_claim_gives_the_claim_back(fake, monkeypatch):
    """A KeyboardInterrupt (any BaseException) between the claim and the view: the claim is
    given back at once, not held by this live process until it exits, and the interrupt goes on."""
    value, metadata = _message(fake)

    def interrupted(event, index):
        raise KeyboardInterrupt

    monkeypatch.setattr(fake, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tc.decode(value, metadata)
    monkeypatch.undo()
    wait_live_bytes(0)  # collected: nothing holds it
    assert cuda_ipc._get_state().receiver.stats()["claimed"] == 1


def test_a_ledger_let_go_of_while_a_message_of_it_is_held_stays_open_until_it_is_given_back(fake, monkeypatch):
    """A receiver follows at most MAX_LEDGERS producers: one let go of (another producer's message
    came) while this process holds a message of it stays open, kept aside, and is taken back as it
    was if its producer sends again; the release of the held message reaches the producer, and
    then the view closes. (Closed at once, as it was, the release was lost on a closed mapping:
    the producer kept that memory for as long as the receiver lived.)"""
    from tensor_codec.cuda_ipc import receiving
    from tensor_codec.cuda_ipc.ledger import Ledger

    monkeypatch.setattr(receiving, "MAX_LEDGERS", 1)
    held, _, _ = roundtrip(torch.arange(8))
    receiver = cuda_ipc._get_state().receiver
    ((name, view),) = receiver.ledgers.items()
    assert view.holds == 1
    other = Ledger(slots=4)  # a second producer's ledger
    try:
        ref = other.publish(expected=1, nbytes=8, token="memory")
        other_view = receiver._ledger(other.name)  # (its hold, as a receive takes one)
        holder = other_view.claim(ref)
        assert list(receiver.ledgers) == [other.name] and receiver.retired == {name: view}
        assert not view.file.closed
        again, _, _ = roundtrip(torch.arange(4))  # its producer sends again: the same view, taken back
        assert receiver.ledgers[name] is view and view.holds == 2 and other.name in receiver.retired
        del again
        wait_live_bytes(8 * 8)  # `held` still
        del held
        wait_live_bytes(0)  # given back through the view kept open
        receiver._give_back(other_view, ref, holder)
        (finished,) = other.collect()
        assert finished.token == "memory"
        assert other_view.file.closed and not receiver.retired  # let go of, and its last hold given back
        assert not view.file.closed
    finally:
        other.close()


def test_a_buffer_the_allocator_placed_unaligned_is_refused_at_the_send(fake, monkeypatch):
    """Receivers refuse a message whose buffer is not 256-aligned in its segment, so the producer
    refuses to send from one, saying why and what to do, instead of every receiver refusing."""
    real_export = fake.export
    monkeypatch.setattr(fake, "export", lambda buffer: (real_export(buffer)[0], real_export(buffer)[1] + 8))
    with pytest.raises(
        tc.EncodeError, match=r"at byte \d+ of its segment, expected a multiple of 256 .*transport='host'"
    ):
        tc.encode(torch.arange(8), transport="cuda-ipc")


def test_missing_ipc_field(fake):
    value, metadata = _message(fake)
    del metadata["tc.ipc.event"]
    with pytest.raises(tc.DecodeError, match="tc.ipc.event"):
        tc.decode(value, metadata)


def test_bytes_in_the_value_are_refused(fake):
    _, metadata = _message(fake)
    with pytest.raises(tc.DecodeError, match="value: expected an empty Arrow array"):
        tc.decode(pa.array([1, 2, 3], type=pa.uint8()), metadata)


def _with_producer(metadata, **changes):
    import json

    header = json.loads(metadata["tc.header"])
    header["producer"].update(changes)
    out = dict(metadata)
    out["tc.header"] = json.dumps(header)
    return out


def test_a_message_from_another_machine_names_both(fake):
    value, metadata = _message(fake)
    bad = _with_producer(metadata, host="0c1e0000-aaaa@gpu-box-7")
    with pytest.raises(tc.DecodeError, match=r"tc.header.producer.host: .*'gpu-box-7'.*and this is"):
        tc.decode(value, bad)


def test_a_gpu_this_process_cannot_see_names_both(fake):
    value, metadata = _message(fake)
    bad = _with_producer(metadata, gpu="GPU-99999999-0000-0000-0000-000000000000")
    with pytest.raises(tc.DecodeError, match=r"GPU-99999999.*cannot see \(it sees GPU-00000000-1111") as e:
        tc.decode(value, bad)
    # the host transport's wording (one home: gpus.py), with this transport's way out
    assert str(e.value).startswith(
        "tc.header.producer.gpu: the message's tensors were on GPU-99999999-0000-0000-0000-000000000000, which"
    )
    assert str(e.value).endswith(
        "send with transport='host' to reach another GPU (the receiver restores host "
        "bytes onto the GPU it asks for with device=...)"
    )


def test_the_same_gpu_under_another_index_is_found(fake):
    fake.gpus.insert(0, "GPU-aaaaaaaa-0000-0000-0000-000000000000")  # as CUDA_VISIBLE_DEVICES=1,0 would
    gpus.current().index_of_uuid.clear()
    value, metadata = _message(fake)
    assert tc.decode(value, metadata).tolist() == list(range(8))


def test_a_dead_producer_gives_a_clear_error(fake, monkeypatch):
    from tensor_codec.cuda_ipc import receiving

    value, metadata = _message(fake)
    monkeypatch.setattr(receiving, "pid_alive", lambda pid: False)
    with pytest.raises(tc.DecodeError, match=r"tc.header.producer.pid: the producer \(process \d+\) has exited"):
        tc.decode(value, metadata)


def test_a_ledger_not_of_the_producer_is_refused(fake):
    value, metadata = _message(fake)
    with pytest.raises(tc.DecodeError, match="tc.header.producer.ledger: expected the ledger of process"):
        tc.decode(value, _with_producer(metadata, pid=2**31 - 2))


@pytest.mark.parametrize(
    "field,bad,match",
    [
        ("gpu", "nvidia0", "tc.header.producer.gpu: expected a GPU UUID"),
        ("ledger", "../../etc/passwd", "tc.header.producer.ledger"),
        ("pid", -5, "tc.header.producer.pid"),
        ("host", "", "tc.header.producer.host"),
    ],
)
def test_hostile_producer_fields(fake, field, bad, match):
    value, metadata = _message(fake)
    with pytest.raises(tc.DecodeError, match=match):
        tc.decode(value, _with_producer(metadata, **{field: bad}))


def test_the_sending_process_itself_is_refused():
    # The real identity check, without the test stand-in's exemption.
    producer = ProducerIdentity(
        identity.host_identity(),
        identity.pid_namespace(),
        __import__("os").getpid(),
        "GPU-0000000000",
        "tc-1-000000000000",
    )
    with pytest.raises(tc.DecodeError, match="cannot be opened by the process that sent it"):
        identity.check_same_machine(producer)


# ---------------------------------------------------------------------------------- without a GPU


@pytest.mark.parametrize(
    "obj", [{}, torch.zeros(3), {"n": 3, "boxes": [torch.ones(2, 4)]}], ids=["empty_dict", "cpu_tensor", "cpu_nested"]
)
def test_a_message_without_a_cuda_tensor_goes_as_host_bytes_logged_once(obj, caplog, monkeypatch):
    """cuda-ipc shares GPU memory; a message with none (the suite's nested/empty_dict, CPU
    tensors) would otherwise be lost from a cuda-ipc stream. No CUDA code is loaded for it."""
    from tensor_codec import codec

    # tc.encode's Output logs each choice once per process: a record of its own for this test.
    monkeypatch.setattr(codec._ENCODE, "announced", set())
    cuda_ipc.use_backend(None)
    with caplog.at_level(logging.INFO, logger="tensor_codec"):
        for _ in range(3):
            value, metadata = tc.encode(obj, transport="cuda-ipc")
            assert transport_of(metadata) == "host"
            assert_identical(tc.decode(value, metadata, copy=True), obj)
    said = [r.getMessage() for r in caplog.records if "transport host" in r.getMessage()]
    assert said == [
        "output '<tc.encode>': transport host (no CUDA tensor in the message: cuda-ipc shares GPU memory, so host "
        "bytes carry it)"
    ]
    assert cuda_ipc._state is None  # the CUDA backend was never started


def test_unknown_transport_names_the_choices():
    with pytest.raises(tc.EncodeError, match=r"\['host', 'cuda-ipc'\]"):
        tc.encode(torch.zeros(3), transport="nccl")


def test_tvtensor_image_over_the_stand_in(fake):
    img = tv_tensors.Image(torch.randint(0, 255, (3, 8, 8), dtype=torch.uint8))
    got, _, _ = roundtrip(img)
    assert type(got) is tv_tensors.Image and torch.equal(got, img)


def test_a_release_queued_while_the_receiver_polls_is_not_lost(tmp_path):
    """A message's last view can die, and its finalizer queue a release, on the very thread that
    is polling (the receiver's lock is re-entrant): that release must still happen."""
    from tensor_codec.cuda_ipc.ledger import SlotRef
    from tensor_codec.cuda_ipc.receiving import Receiver
    from tests.support.ipc_fake_backend import FakeBackend

    released = []

    class Ledger:
        name = "tc-1-000000000000"
        holds = 2  # the two claims (`Receiver._ledger` counts them)

        def release(self, ref, holder=None):
            released.append(ref.slot)

    receiver = Receiver(FakeBackend(directory=str(tmp_path)))
    ledger = Ledger()

    class MarkerWhoseQueryFinalizesAnother:
        def query(self):
            receiver._on_last_view_gone(ledger, SlotRef("tc-1-000000000000", 2, 1), 0)
            return True

    receiver.pending.append((MarkerWhoseQueryFinalizesAnother(), 0, ledger, SlotRef("tc-1-000000000000", 1, 1), None))
    receiver.poll()
    wait_until(lambda: (receiver.poll(), sorted(released))[1] == [1, 2], describe="both releases")
