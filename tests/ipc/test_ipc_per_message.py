"""What a CUDA IPC message costs the codec, counted (issue 62), on the CPU stand-in: in steady
state a stream of one tensor, dropped by its receiver as it comes, builds no plan or header,
scans the ledger only once per batch of messages, takes at most LOCK_SECTIONS_PER_MESSAGE locked
sections of a ledger per message, registers no finalizer and wakes no thread; a quiet receiver still gives memory back
on the timer's next tick. Counts, not times: they hold on every machine."""

from __future__ import annotations

import gc
import json
import time
import weakref
from types import SimpleNamespace

import pytest
import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec import send_pipeline
from tensor_codec.cuda_ipc import ledger as ledger_module
from tensor_codec.cuda_ipc import receiving
from tensor_codec.cuda_ipc import transport as cuda_ipc
from tensor_codec.cuda_ipc.producing import COLLECT_BATCH
from tensor_codec.testing import assert_identical
from tensor_codec.wire.cuda_ipc import buffer_key
from tests.support.fakes import FakeNode
from tests.support.waiting import wait_until

MESSAGES = 400
# A claim: one; a publish and a release none; a collect decides a batch of COLLECT_BATCH messages
# in one more (docs/cuda-ipc-design.md, "Locks per message", says why each is needed).
LOCK_SECTIONS_PER_MESSAGE = 1 + 1 / COLLECT_BATCH


def _sections(state) -> int:
    files = [state.producer.ledger.file, *(view.file for view in state.receiver.ledgers.values())]
    return sum(f.sections for f in files)


def _sender(how: str):
    """-> a function that sends a tensor by CUDA IPC and returns its (value, metadata): with
    `tc.encode`, or with `tc.send` on a dora output (a stand-in node wired to one receiver)."""
    if how == "encode":
        return lambda t: tc.encode(t, transport="cuda-ipc")
    node = FakeNode(
        node_id="cam",
        descriptor={"nodes": [{"id": "cam", "outputs": ["image"]}, {"id": "a", "inputs": {"x": "cam/image"}}]},
    )

    def send(t):
        tc.send(node, "image", t, {"seq": 1}, transport="cuda-ipc")
        _, value, metadata = node.sent.pop()
        return value, metadata

    return send


@pytest.mark.parametrize("how", ["encode", "send"])
@pytest.mark.parametrize("size", [4096, 1 << 20], ids=["4KB", "1MB"])
def test_a_dropped_stream_costs_no_plan_no_header_no_scan_no_wakeup(fake, monkeypatch, size, how):
    t = torch.arange(size, dtype=torch.int32).to(torch.uint8)
    send = _sender(how)

    def one() -> None:
        value, metadata = send(t)
        got = tc.decode(value, metadata)
        assert got.shape == t.shape
        del got  # the receiver drops it: its release begins on this thread

    for _ in range(2 * COLLECT_BATCH):  # warm-up: the buffers a batch needs, the header compiled
        one()
    counts = {"plans": 0, "headers": 0, "collects": 0, "finalizers": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(send_pipeline, "make_plan", counting("plans", send_pipeline.make_plan))
    # A message's memory gives it back from its own __del__ (backend.MessageMemory.on_gone): a
    # weakref.finalize per message would register each in a global table.
    monkeypatch.setattr(weakref, "finalize", counting("finalizers", weakref.finalize))
    monkeypatch.setattr(cuda_ipc, "header_metadata", counting("headers", cuda_ipc.header_metadata))
    monkeypatch.setattr(
        ledger_module.Ledger, "collect", counting("collects", ledger_module.Ledger.collect), raising=True
    )
    state = cuda_ipc._get_state()
    sections, ticks, setup = _sections(state), state.receiver.timer_ticks, fake.setup_ops()
    for _ in range(MESSAGES):
        one()
    assert counts["plans"] == 0 and counts["headers"] == 0 and counts["finalizers"] == 0, counts
    assert counts["collects"] <= MESSAGES / COLLECT_BATCH + 1, counts
    per_message = (_sections(state) - sections) / MESSAGES
    assert per_message <= LOCK_SECTIONS_PER_MESSAGE, f"{per_message:.2f} locked sections per message"
    assert state.receiver.timer_ticks == ticks and state.receiver.timer is None  # no thread woken, none started
    assert fake.setup_ops() == setup
    assert state.receiver.released == state.receiver.claimed


def test_a_quiet_receiver_gives_memory_back_on_the_timers_next_tick(fake):
    """Markers that complete after the last view died (the GPU still working): nothing on the
    receiving thread polls, and the timer gives the message back on the tick after completion,
    TIMER_S (<= 5 ms) later; after a while with nothing pending the timer thread ends."""
    assert receiving.TIMER_S <= 0.005
    fake.markers_done = False
    value, metadata = tc.encode(torch.ones(4096, dtype=torch.uint8), transport="cuda-ipc")
    got = tc.decode(value, metadata)
    del got
    gc.collect()
    receiver = cuda_ipc._get_state().receiver
    assert receiver.released == 0 and receiver.timer is not None  # waiting on its marker
    ticks = receiver.timer_ticks
    fake.markers[-1].done = True  # the GPU work queued before the release completed
    wait_until(lambda: receiver.released == 1, describe="the timer's release")
    assert receiver.timer_ticks - ticks <= 2  # the tick under way when it completed, or the next
    wait_until(lambda: receiver.timer is None, describe="the idle timer thread to end")


def test_a_view_that_dies_inside_its_own_ledgers_locked_section_is_released_there(fake):
    """A message's last view can die on any line, even while its thread holds that ledger's lock
    (a claim): its release, which takes no lock, is given back there and then."""
    value, metadata = tc.encode(torch.ones(4096, dtype=torch.uint8), transport="cuda-ipc")
    got = tc.decode(value, metadata)
    receiver = cuda_ipc._get_state().receiver
    (view,) = receiver.ledgers.values()
    with view.file.locked(0, 1):
        del got  # its memory's on_gone runs here, on this thread, and returns
        gc.collect()
        assert receiver.released == 1


def test_flush_gives_back_what_this_process_received_without_a_sleep(fake, monkeypatch):
    """tc.ipc_flush waits on progress: a message this process received and dropped, whose GPU
    work has completed, goes back at its first look (no fixed sleep first)."""
    monkeypatch.setattr(receiving, "TIMER_S", 60.0)  # the timer stays out of it
    fake.markers_done = False
    value, metadata = tc.encode(torch.ones(4096, dtype=torch.uint8), transport="cuda-ipc")
    got = tc.decode(value, metadata)
    del got
    gc.collect()
    fake.markers[-1].done = True
    sleeps: list[float] = []
    monkeypatch.setattr(cuda_ipc, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleeps.append))
    assert tc.ipc_flush(timeout_s=5) and sleeps == []


def _cases() -> dict:
    from tensor_codec.testing import make_dtype_cases, make_layout_cases, make_tvtensor_cases

    cases = {f"layout/{k}": v for k, v in make_layout_cases().items()}
    cases.update({f"dtype/{k}": v for k, v in make_dtype_cases().items()})
    cases.update({f"tv/{k}": v for k, v in make_tvtensor_cases().items() if isinstance(v, torch.Tensor)})
    return cases


@pytest.mark.parametrize("name", sorted(_cases()))
def test_a_prepared_send_is_the_full_paths_message(fake, monkeypatch, name):
    """Every layout, dtype and TVTensor sent twice: the second message (prepared where its
    signature allows: a contiguous tensor, Image, Video or Mask always) is bit-exact, with the
    first's header."""
    t = _cases()[name]
    first_value, first = tc.encode(t, transport="cuda-ipc")
    plans = []
    real = send_pipeline.make_plan
    monkeypatch.setattr(send_pipeline, "make_plan", lambda obj: plans.append(obj) or real(obj))
    value, metadata = tc.encode(t, transport="cuda-ipc")
    plain = t.as_subclass(torch.Tensor)
    bare = type(t) is torch.Tensor or isinstance(t, (tv_tensors.Image, tv_tensors.Video, tv_tensors.Mask))
    resolved = not (plain.requires_grad or plain.is_conj() or plain.is_neg())
    if bare and resolved and plain.is_contiguous() and plain.numel():
        assert plans == [], "a contiguous tensor's second message was planned again"
    assert metadata["tc.header"] == first["tc.header"]
    assert_identical(tc.decode(value, metadata), t)
    assert_identical(tc.decode(first_value, first), t)


def test_a_prepared_send_copies_what_the_tensor_holds_when_sent(fake):
    """Send-then-modify on the prepared path: each message holds the tensor's bytes at its send."""
    t = torch.arange(1024, dtype=torch.float32)
    messages = []
    for _ in range(4):
        messages.append(tc.encode(t, transport="cuda-ipc"))
        t += 1  # in place, after the send
    for step, (value, metadata) in enumerate(messages):
        assert torch.equal(tc.decode(value, metadata), torch.arange(1024, dtype=torch.float32) + step)


@pytest.mark.parametrize(
    "key, bad, match",
    [
        ("tc.ipc.size", 4095, r"^tc\.ipc\.size: expected 4096 bytes"),
        ("tc.ipc.size", "4096", r"^tc\.ipc\.size: expected an integer"),
        ("tc.ipc.slot", 65536, r"^tc\.ipc\.slot: expected an integer 0\.\.65535"),
        ("tc.ipc.slot", True, r"^tc\.ipc\.slot: expected an integer"),
        ("tc.ipc.generation", 0, r"^tc\.ipc\.generation: expected an integer 1\.\."),
        ("tc.ipc.generation", None, r"^tc\.ipc\.generation: expected an integer"),
    ],
)
def test_a_message_in_a_known_buffer_still_has_its_own_fields_checked(fake, key, bad, match):
    """A receiver that knows a message's buffer reads only the message's own fields: each is
    still refused, naming it, before anything is claimed."""
    t = torch.ones(4096, dtype=torch.uint8)
    for _ in range(2 * COLLECT_BATCH + 1):  # every buffer the stream uses, received once
        got = tc.decode(*tc.encode(t, transport="cuda-ipc"))
        del got
    value, metadata = tc.encode(t, transport="cuda-ipc")
    receiver = cuda_ipc._get_state().receiver
    assert (metadata["tc.header"] and buffer_key(metadata)) and any(
        key[1:] == buffer_key(metadata) for key in receiver.buffers
    ), "the message's buffer is known"
    claimed = receiver.claimed
    with pytest.raises(tc.DecodeError, match=match):
        tc.decode(value, {**metadata, key: bad})
    assert receiver.claimed == claimed


def test_a_known_buffer_named_under_another_identity_is_checked_in_full(fake):
    """The keys of a buffer this receiver knows, in a header naming another GPU: the message is
    checked as a new buffer's would be (refused: this process cannot see that GPU), not opened
    with what the honest producer's messages were found to be."""
    t = torch.ones(4096, dtype=torch.uint8)
    for _ in range(2 * COLLECT_BATCH + 1):
        got = tc.decode(*tc.encode(t, transport="cuda-ipc"))
        del got
    value, metadata = tc.encode(t, transport="cuda-ipc")
    header = json.loads(metadata["tc.header"])
    header["producer"]["gpu"] = "GPU-99999999-1111-2222-3333-444444444444"
    with pytest.raises(tc.DecodeError, match=r"^tc\.header\.producer\.gpu"):
        tc.decode(value, {**metadata, "tc.header": json.dumps(header)})
    assert tc.decode(*tc.encode(t, transport="cuda-ipc")).shape == t.shape  # the honest stream goes on
