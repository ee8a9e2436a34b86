"""Claims are per receiver: a slot is finished when each receiving process expected claimed it,
counted at most as often as that process has inputs wired to the output (`per_process`). A
process that claims one message again (a monitor shown a forwarded copy, a flood through
LedgerView or written straight into the ledger file) never stands in for a receiver that has not
claimed yet; a process that passes a message over twice takes part once. Other receivers are
other processes (tests/ipc/other_process.py)."""

from __future__ import annotations

import os
import time

import pytest
import torch

import tensor_codec as tc
from tensor_codec.cuda_ipc.ledger import HOLDERS, SWEEP_NS, Ledger, LedgerError, LedgerView, SlotRef
from tensor_codec.cuda_ipc.ledger_file import HOLDER, HOLDER_BYTES, LIVE, RELEASED, SLOT_HEAD, holder_word, slot_offset
from tensor_codec.dora import Link
from tensor_codec.transports import get_transport
from tests.ipc.other_process import claim_and_release_elsewhere, slot_of
from tests.support.fakes import FakeNode


@pytest.fixture
def ledger():
    led = Ledger(slots=4, claim_timeout_s=60.0)
    yield led
    led.close()


def already_claimed(times: int) -> str:
    return rf"^ledger slot \d+, generation \d+: this process \(pid \d+\) already claimed the message {times} time"


# ---------------------------------------------------------------------------------- a doubled pass


def test_a_message_passed_twice_by_one_process_still_waits_for_its_other_receiver(ledger):
    """A monitor and a receiver wired to one output (one input each); the monitor is shown the
    message twice (a node forwarded a copy to it)."""
    ref = ledger.publish(expected=2, nbytes=1, token="m", output="o")
    monitor = LedgerView(ledger.name)
    assert monitor.pass_over(ref) is True
    assert monitor.pass_over(ref) is False  # a copy: nothing claimed
    now = time.monotonic_ns()
    assert ledger.collect(now_ns=now) == [] and ledger.collect(now_ns=now + SWEEP_NS) == []
    claim_and_release_elsewhere(ref)  # the receiver: its claim is not refused as "expired"
    assert [f.token for f in ledger.collect()] == ["m"]
    assert monitor.pass_over(ref) is False  # a copy after the slot was freed: still nothing to do


def test_pass_unread_twice_claims_once_and_the_receiver_still_gets_the_message(fake):
    node = FakeNode(
        node_id="cam",
        descriptor={
            "nodes": [
                {"id": "cam", "outputs": ["image"]},
                {"id": "monitor", "inputs": {"image": "cam/image"}},
                {"id": "receiver", "inputs": {"x": "cam/image"}},
            ]
        },
    )
    tc.send(node, "image", torch.arange(64.0), transport="cuda-ipc")
    (_, _, metadata) = node.sent[-1]
    transport = get_transport("cuda-ipc")
    transport.pass_unread(metadata)
    transport.pass_unread(metadata)
    stats = tc.ipc_stats()
    assert (stats["receiver"]["passed_unread"], stats["receiver"]["passed_again"]) == (1, 1)
    assert stats["outputs"]["image"]["messages_in_flight"] == 1  # waiting for the receiver
    claim_and_release_elsewhere(slot_of(metadata))  # the receiver
    assert tc.ipc_flush(timeout_s=10)


# ------------------------------------------------------------------------------------- a forged flood


def forge_claims(ledger: Ledger, ref: SlotRef, pid: int) -> None:
    """Released claims of `pid` in every holder entry but the last, the cap raised and the
    expected count lowered in the slot's head: the file written as any process of this user can."""
    m, start = ledger.file.map, slot_offset(ref.slot)
    gen, state, _, _, claims, published, nbytes = SLOT_HEAD.unpack_from(m, start)
    for h in range(claims, HOLDERS - 1):
        HOLDER.pack_into(m, start + 32 + h * HOLDER_BYTES, pid, holder_word(RELEASED, gen), time.monotonic_ns())
    SLOT_HEAD.pack_into(m, start, gen, LIVE, HOLDERS, 1, HOLDERS - 1, published, nbytes)


@pytest.mark.parametrize("per_process", [1, 2])
def test_a_claim_flood_by_one_process_counts_at_most_its_share(ledger, per_process):
    """A receiver with `per_process` inputs on the output, and one more receiver elsewhere."""
    ref = ledger.publish(expected=per_process + 1, nbytes=1, token="m", output="o", per_process=per_process)
    flooder = LedgerView(ledger.name)
    for _ in range(per_process):
        flooder.claim(ref)
        flooder.release(ref)
    for _ in range(5):
        with pytest.raises(LedgerError, match=already_claimed(per_process)):
            flooder.claim(ref)
    now = time.monotonic_ns()
    assert ledger.collect(now_ns=now) == [] and ledger.collect(now_ns=now + SWEEP_NS) == []
    forge_claims(ledger, ref, os.getpid())
    assert ledger.collect(now_ns=now + SWEEP_NS + 1) == [] and ledger.collect(now_ns=now + 2 * SWEEP_NS) == []
    claim_and_release_elsewhere(ref)  # the real receiver
    assert [(f.token, f.unclaimed) for f in ledger.collect()] == [("m", 0)]


# ------------------------------------------------------------------ a node with two inputs on one output


def two_input_node() -> FakeNode:
    return FakeNode(
        node_id="cam",
        descriptor={
            "nodes": [
                {"id": "cam", "outputs": ["image", "other"]},
                {"id": "a", "inputs": {"x": "cam/image", "y": {"source": "cam/image", "queue_size": 2}}},
                {"id": "b", "inputs": {"z": "cam/other"}},
            ]
        },
    )


def test_receivers_per_process_is_the_most_inputs_one_node_has_on_the_output():
    node = two_input_node()
    link = Link.of(node)
    assert link.output("image").receivers_per_process() == 2
    assert link.output("other").receivers_per_process() == 1
    assert link.output("none").receivers_per_process() == 1
    assert Link.of(FakeNode(descriptor=None)).output("image").receivers_per_process() == 1  # unknown: 1


def test_a_node_with_two_inputs_on_one_output_claims_twice_and_the_slot_finishes(fake):
    node = two_input_node()
    tc.send(node, "image", torch.arange(8.0), transport="cuda-ipc")
    (_, value, metadata) = node.sent[-1]
    x, y = tc.decode(value, metadata), tc.decode(value, metadata)  # this process is node a: two inputs
    assert x.tolist() == y.tolist() == list(range(8))
    with pytest.raises(tc.DecodeError, match=r"^tc.ipc.slot: " + already_claimed(2)[1:]):
        tc.decode(value, metadata)  # a third copy
    assert tc.ipc_stats()["outputs"]["image"]["messages_in_flight"] == 1
    del x, y
    assert tc.ipc_flush(timeout_s=10)


# ------------------------------------------------------------------------------- the refusal's words


def test_an_expired_message_says_whether_its_slot_was_freed_or_reused():
    ledger = Ledger(slots=1)
    try:
        view = LedgerView(ledger.name)
        ref = ledger.publish(expected=0, nbytes=1, token=None)
        assert len(ledger.collect()) == 1  # nobody expected: freed at once
        with pytest.raises(LedgerError, match=r"^message expired: .* \(slot 0, generation 1: freed, not reused\)"):
            view.claim(ref)
        ledger.publish(expected=1, nbytes=1, token=None)  # the one slot again
        reused = r"^message expired: .* \(slot 0, generation 1: reused, now generation 2\)"
        with pytest.raises(LedgerError, match=reused):
            view.claim(ref)
        with pytest.raises(LedgerError, match=r"^message expired or never sent: slot 0, generation 3 names a"):
            view.claim(SlotRef(ledger.name, 0, 3))
        view.close()
    finally:
        ledger.close()
