"""The CUDA IPC release ledger, on any machine: real processes claim and release slots."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

from tensor_codec.cuda_ipc.ledger import HOLDERS, Ledger, LedgerError, LedgerView, SlotRef

SECOND = 1_000_000_000


@pytest.fixture
def ledger():
    led = Ledger(slots=8, claim_timeout_s=5.0)
    yield led
    led.close()


def test_a_slot_is_finished_when_every_expected_receiver_released(ledger):
    ref = ledger.publish(expected=2, nbytes=100, token="memory")
    a, b = LedgerView(ref.ledger), LedgerView(ref.ledger)
    a.claim(ref)
    b.claim(ref)
    assert ledger.collect() == [] and ledger.bytes_live() == 100
    a.release(ref, b"\x01" * 64)
    assert ledger.collect() == []
    b.release(ref)
    (finished,) = ledger.collect()
    assert finished.token == "memory" and finished.events == [b"\x01" * 64]
    assert ledger.bytes_live() == 0


def test_unclaimed_messages_finish_after_the_claim_timeout(ledger):
    ref = ledger.publish(expected=1, nbytes=10, token="t")
    now = time.monotonic_ns()
    assert ledger.collect(now_ns=now) == []
    (finished,) = ledger.collect(now_ns=now + 6 * SECOND)  # dora dropped it on the way
    assert finished.token == "t"
    with pytest.raises(LedgerError, match="message expired: its producer reclaimed the memory"):
        LedgerView(ref.ledger).claim(ref)


def test_a_claim_holds_the_slot_past_the_timeout(ledger):
    ref = ledger.publish(expected=1, nbytes=10, token="t")
    view = LedgerView(ref.ledger)
    view.claim(ref)
    assert ledger.collect(now_ns=time.monotonic_ns() + 60 * SECOND) == []
    view.release(ref)
    assert len(ledger.collect()) == 1


def test_generations_make_stale_references_fail(ledger):
    first = ledger.publish(expected=0, nbytes=1, token=1)
    assert len(ledger.collect()) == 1  # nobody expected: finished at once
    for _ in range(8):  # go round the ring to reuse the slot
        ledger.publish(expected=0, nbytes=1, token=2)
        ledger.collect()
    with pytest.raises(LedgerError, match="message expired"):
        LedgerView(first.ledger).claim(first)


def test_a_full_ledger_is_an_error(ledger):
    for _ in range(8):
        ledger.publish(expected=1, nbytes=1, token=None)
    with pytest.raises(LedgerError, match="all 8 slots hold messages still in use"):
        ledger.publish(expected=1, nbytes=1, token=None)


def test_hostile_references_are_refused(ledger):
    view = LedgerView(ledger.name)
    with pytest.raises(LedgerError, match="ledger slot: expected 0..7, got 8"):
        view.claim(SlotRef(ledger.name, 8, 1))
    with pytest.raises(LedgerError, match="ledger slot: expected 0..7, got -1"):
        view.claim(SlotRef(ledger.name, -1, 1))
    with pytest.raises(LedgerError, match="expected a name like 'tc-...'"):
        LedgerView("../etc/passwd")
    with pytest.raises(LedgerError, match="does not exist"):
        LedgerView("tc-no-such-ledger")


def test_too_many_receivers_of_one_message(ledger):
    ref = ledger.publish(expected=HOLDERS, nbytes=1, token=None)
    view = LedgerView(ref.ledger)
    for _ in range(HOLDERS):
        view.claim(ref)
    with pytest.raises(LedgerError, match=f"more than {HOLDERS} receivers"):
        view.claim(ref)


def _claim_and_maybe_release(name, slot, generation, release):
    view = LedgerView(name)
    ref = SlotRef(name, slot, generation)
    view.claim(ref)
    if release:
        view.release(ref)
    os._exit(0)  # no cleanup at all, like a crash


def test_receivers_in_other_processes_and_a_receiver_that_dies_holding(ledger):
    ctx = mp.get_context("fork")
    ref = ledger.publish(expected=3, nbytes=5, token="frames")
    procs = [
        ctx.Process(target=_claim_and_maybe_release, args=(ref.ledger, ref.slot, ref.generation, i < 2))
        for i in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    # Two released; the third died holding its claim: its process is gone, so the slot is done.
    (finished,) = ledger.collect()
    assert finished.token == "frames"


def _claim_many(name, slot, generation, count):
    view = LedgerView(name)
    for _ in range(count):
        view.claim(SlotRef(name, slot, generation))
    os._exit(0)


def test_claims_from_many_processes_at_once_are_all_counted():
    ledger = Ledger(slots=1)
    try:
        ref = ledger.publish(expected=HOLDERS, nbytes=1, token=None)
        ctx = mp.get_context("fork")
        procs = [ctx.Process(target=_claim_many, args=(ref.ledger, ref.slot, ref.generation, 4)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(10)
        import struct

        from tensor_codec.cuda_ipc.ledger import HEADER_BYTES

        claims = struct.unpack_from("<H", ledger.file.map, HEADER_BYTES + 14)[0]
        assert claims == HOLDERS
    finally:
        ledger.close()


def test_close_removes_the_file():
    ledger = Ledger(slots=2)
    path = ledger.file.path
    assert os.path.exists(path)
    ledger.close()
    assert not os.path.exists(path)
