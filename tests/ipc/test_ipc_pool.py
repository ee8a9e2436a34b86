"""The sending process's message buffers (tensor_codec/cuda_ipc/pool.py): size classes, reuse,
the idle bound, trimming, and stream order on reuse, over the CPU stand-in backend."""

from __future__ import annotations

import pytest
import torch

import tensor_codec as tc
from tensor_codec.cuda_ipc import transport as cuda_ipc
from tensor_codec.cuda_ipc.pool import MIN_CLASS_BYTES, BufferPool, size_class
from tests.support.fakes import FakeNode
from tests.support.ipc_fake_backend import FakeBackend, FakeStream
from tests.support.waiting import wait_until


@pytest.mark.parametrize(
    "nbytes, expected",
    [
        (0, 4096),
        (1, 4096),
        (4096, 4096),
        (4097, 5120),
        (5000, 5120),
        (8192, 8192),
        (8193, 10240),
        (1 << 20, 1 << 20),
        ((1 << 20) + 1, 5 << 18),
        (3 << 20, 3 << 20),
        (64 << 20, 64 << 20),
    ],
)
def test_size_classes(nbytes, expected):
    assert size_class(nbytes) == expected


def test_a_size_class_wastes_at_most_a_quarter():
    for n in list(range(MIN_CLASS_BYTES, 70_000, 37)) + [10**6 + k for k in range(0, 10**6, 9973)]:
        c = size_class(n)
        assert n <= c <= n * 1.25, n


@pytest.fixture
def backend(tmp_path):
    b = FakeBackend(directory=str(tmp_path))
    yield b
    b.close()


def test_a_returned_buffer_is_reused_without_new_set_up(backend):
    pool = BufferPool(backend)
    first = pool.take(5000, 0)
    assert (first.capacity, backend.ops["allocate"], backend.ops["export"], backend.ops["new_event"]) == (5120, 1, 1, 1)
    pool.give_back(first)
    again = pool.take(4500, 0)  # the same class
    assert again is first and backend.setup_ops() == 3
    other = pool.take(20_000, 0)  # another class: a buffer of its own
    assert other is not first and backend.ops["allocate"] == 2
    assert pool.stats()["buffers_made"] == 2 and pool.stats()["buffers_reused"] == 1


def test_idle_buffers_past_the_bound_go_back_to_the_allocator(backend):
    pool = BufferPool(backend, max_idle_bytes=3 * 4096)
    buffers = [pool.take(100, 0) for _ in range(5)]
    for b in buffers:
        pool.give_back(b)
    assert pool.stats()["idle_buffers"] == 3 and pool.idle_bytes == 3 * 4096
    assert backend.ops["retire"] == 2
    assert pool.trim() == 3 and backend.ops["retire"] == 5 and pool.idle_bytes == 0


def test_a_buffer_last_written_on_another_stream_is_waited_for_before_it_is_written_again(fake):
    """Through lay_out, its one writer. No receiver claims: the producer takes each message back
    at once (claim timeout 0), so every device wait counted is the producer's."""
    state = cuda_ipc._get_state()
    state.producer.ledger.claim_timeout_ns = 0

    def send_and_take_back() -> None:
        tc.encode(torch.arange(100), transport="cuda-ipc")
        wait_until(lambda: state.producer.collect() or not state.producer.in_flight(), describe="the take-back")

    send_and_take_back()  # a new buffer, never written: nothing to wait for
    send_and_take_back()  # the same buffer, on the same stream: stream order suffices
    assert fake.ops["wait"] == 0 and fake.ops["allocate"] == 1
    (buffer,) = state.pool.by_age.values()
    fake.stream = FakeStream("side")
    send_and_take_back()
    assert fake.ops["wait"] == 1 and fake.events_waited == [buffer.event_handle]


def test_a_failed_send_gives_its_buffer_back_for_the_next(fake):
    with pytest.raises(RuntimeError, match="daemon gone"):
        tc.send(FakeNode(descriptor={}, fail="daemon gone"), "x", torch.zeros(10), transport="cuda-ipc")
    made = fake.ops["allocate"]
    value, metadata = tc.encode(torch.zeros(10), transport="cuda-ipc")
    assert fake.ops["allocate"] == made  # the failed send's buffer, reused
    del value, metadata


def test_ipc_trim_gives_idle_buffers_back(fake):
    got = tc.decode(*tc.encode(torch.arange(1000), transport="cuda-ipc"))
    assert tc.ipc_trim() == 0  # still in use
    del got
    state = cuda_ipc._get_state()

    def collected() -> bool:
        state.receiver.poll()
        state.producer.collect()
        return not state.producer.in_flight()

    wait_until(collected, describe="the message to be released and collected")
    assert tc.ipc_stats()["pool"]["idle_buffers"] == 1
    assert tc.ipc_trim() == 1 and fake.ops["retire"] == 1
    assert tc.ipc_stats()["pool"]["idle_buffers"] == 0


def test_a_stream_that_changes_sizes_past_the_idle_bound_settles_without_set_up(backend):
    """The buffers idle longest are retired, not the one coming back: after a change of size the
    new size's buffers stay, and a retired buffer's event serves the next new buffer (an
    exported event is never destroyed while the producer lives)."""
    pool = BufferPool(backend, max_idle_bytes=3 * 4096)
    old = [pool.take(100, 0) for _ in range(3)]
    for b in old:
        pool.give_back(b)
    old_events = {b.event_handle for b in old}
    first = pool.take(5000, 0)  # the new size: no spare event yet, a new one
    pool.give_back(first)  # past the bound: the two oldest old buffers go, their events stay
    assert backend.ops["new_event"] == 4 and backend.ops["retire"] == 2
    again, second = pool.take(5000, 0), pool.take(5000, 0)
    assert again is first and second.event_handle in old_events and backend.ops["new_event"] == 4
    pool.give_back(again)
    pool.give_back(second)  # the last old buffer goes
    assert backend.ops["retire"] == 3 and pool.stats()["idle_buffers"] == 2
    before = backend.setup_ops()
    for _ in range(100):  # two in flight at a time, as before
        pair = pool.take(5000, 0), pool.take(5000, 0)
        for b in pair:
            pool.give_back(b)
    assert backend.setup_ops() == before and backend.ops["retire"] == 3
