"""Acknowledged delivery without dora (nodes/common/delivery.py): the window a producer keeps, the
copies it lets into a consumer's queue (a simulated dora input queue), and the relay through the
JPEG encoder and decoder, with a fake clock and fake events; the window sized from the dataflow
and refused when it does not fit. The real dataflows are in test_delivery_e2e.py."""

from __future__ import annotations

import logging
from collections import deque
from types import SimpleNamespace

import pytest
import yaml

from tensor_codec.dora import Link
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.delivery import (
    DEFAULT_CAPACITY,
    PROBE_MIN_S,
    AckWindow,
    Outbox,
    Relay,
    SinkIntake,
    ack_for,
    ackers_of,
    not_acknowledged_line,
    sized_window,
)
from tensor_codec_nodes.common.loop import EXIT_BAD_CONFIG, CannotStart
from tests.support.fakes import FakeNode
from tests.support.paths import ROOT

log = logging.getLogger("delivery-test")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def outbox(reliable=True, window=2, retry_s=1.0, give_up_s=5.0, ackers=("ack",), fail=(), capacity=None):
    sent = []

    def send(obj, metadata):
        if obj in fail:
            raise RuntimeError("dora says no")
        sent.append((obj, dict(metadata)))

    clock = Clock()
    box = Outbox(
        AckWindow(
            reliable=reliable, window=window, retry_s=retry_s, give_up_s=give_up_s, ackers=ackers, capacity=capacity
        ),
        send,
        log,
        clock,
    )
    return box, sent, clock


def ack(seq, stream, acker="ack", **extra):
    metadata = {P.SEQ: seq, P.STREAM: stream, **{P.TX if k == "tx" else k: v for k, v in extra.items()}}
    return {"type": "INPUT", "id": acker, "metadata": metadata}


def data(seq, stream="up", input_id="frames", wants_ack=True, **extra):
    metadata = {P.SEQ: seq, P.STREAM: stream, P.COUNT: 10, **extra}
    if wants_ack:
        metadata[P.WANTS_ACK] = True
    return {"type": "INPUT", "id": input_id, "metadata": metadata, "value": f"v{seq}"}


def test_helpers():
    assert ackers_of({"frames", "ack", "ack_sink", "tick"}) == ["ack", "ack_sink"]
    assert ack_for({P.SEQ: 3, P.STREAM: "s", P.WANTS_ACK: True}) == {P.SEQ: 3, P.STREAM: "s"}
    assert ack_for({P.SEQ: 3, P.STREAM: "s"}) is None
    assert (
        not_acknowledged_line(37, 200, "messages", "seq 163") == "37 of 200 messages not acknowledged (first: seq 163)"
    )


def test_an_outbox_counts_every_message_not_acknowledged():
    box, sent, clock = outbox(window=2, give_up_s=3.0)
    box.send(0, {P.STREAM: "s", P.SEQ: 0})
    box.on_ack(ack(0, "s", tx=1))
    box.send(1, {P.STREAM: "s", P.SEQ: 1})
    clock.now = 3.0
    box.resend_due()  # seq 1 given up
    box.send(2, {P.STREAM: "s", P.SEQ: 2})  # unacknowledged when the node stops
    assert box.undelivered(planned=5) == ([("s", 1), ("s", 2)], 2)  # given up, waiting; 2 never sent


def test_outbox_windows_resends_kept_messages_and_forgets_acknowledged_ones():
    box, sent, clock = outbox(window=2)
    box.send("a", {P.STREAM: "s", P.SEQ: 0})
    box.send("b", {P.STREAM: "s", P.SEQ: 1})
    assert box.room() == 0 and sent[0][1][P.WANTS_ACK] is True and P.SENT_NS in sent[0][1]
    assert box.on_ack(ack(0, "s")) and box.room() == 1 and ("s", 0) not in box.kept
    assert box.on_ack(ack(1, "other-stream")) and box.outstanding == 1  # not ours: ignored
    assert not box.on_ack(data(1))  # not an ack input
    clock.now = 1.0
    box.resend_due()
    assert [obj for obj, _ in sent] == ["a", "b", "b"]  # b resent, with its metadata
    assert box.window.retransmits == 1
    clock.now = 5.0
    box.resend_due()  # past give_up_s
    assert box.outstanding == 0 and box.window.lost == [("s", 1)] and not box.kept
    assert box.end_report("frames") == 1


def test_outbox_end_report_counts_what_was_never_sent(caplog):
    box, _, _ = outbox(window=4)
    box.send("a", {P.STREAM: "s", P.SEQ: 0})
    box.send("b", {P.STREAM: "s", P.SEQ: 1})
    box.on_ack(ack(0, "s"))
    with caplog.at_level(logging.ERROR):
        assert box.end_report("frames", planned=10) == 1
    assert "9 of 10 frames not acknowledged (first: seq 1)" in caplog.text
    done, _, _ = outbox()
    done.send("a", {P.STREAM: "s", P.SEQ: 0})
    done.on_ack(ack(0, "s"))
    assert done.end_report("frames") == 0


def test_outbox_without_acks_sends_once_and_never_fails_the_node():
    box, sent, clock = outbox(reliable=False)
    for seq in range(5):
        box.send(seq, {P.STREAM: "s", P.SEQ: seq})
    clock.now = 100.0
    box.resend_due()
    assert len(sent) == 5 and P.WANTS_ACK not in sent[0][1] and not box.kept and box.end_report() == 0


def test_a_send_that_fails_is_raised_and_counted_lost():
    box, _, _ = outbox(fail=("bad",))
    with pytest.raises(RuntimeError):
        box.send("bad", {P.STREAM: "s", P.SEQ: 0})
    assert box.failed == 1 and box.window.lost == [("s", 0)] and box.outstanding == 0


def relay(window=2, **kw):
    box, sent, clock = outbox(window=window, **kw)
    acks = []
    return Relay({"frames"}, box, acks.append, log), sent, acks, clock


def test_relay_takes_only_what_its_window_has_room_for_and_acknowledges_on_taking():
    r, sent, acks, _ = relay(window=2)
    for seq in range(4):
        assert r.on_event(data(seq))
    assert len(r.backlog) == 4 and acks == []  # nothing taken yet, nothing acknowledged
    taken = r.take(r.room(busy=1))  # one already being worked on: room for one more
    assert [e["metadata"][P.SEQ] for e in taken] == [0] and acks == [{P.SEQ: 0, P.STREAM: "up"}]
    r.send("jpeg0", dict(taken[0]["metadata"]))
    r.send("jpeg1", dict(r.take(1)[0]["metadata"]))
    assert r.room() == 0 and len(r.backlog) == 2  # window full: frames 2 and 3 wait, unacknowledged
    out = sent[0][1]
    assert out[P.SEQ] == 0 and out[P.COUNT] == 10 and out[P.STREAM] != "up" and out[P.WANTS_ACK] is True
    r.on_event(ack(0, out[P.STREAM]))
    assert r.room() == 1 and [e["metadata"][P.SEQ] for e in r.take(r.room())] == [2]


def test_relay_skips_duplicates_and_acknowledges_those_already_taken_again():
    r, _, acks, _ = relay(window=8)
    r.on_event(data(0))
    r.on_event(data(0))  # resent while still waiting: skipped, acknowledged once taken
    assert len(r.backlog) == 1 and r.duplicates == 1 and acks == []
    r.take(8)
    r.on_event(data(0))  # resent after it was taken (its ack was late): acknowledged again
    assert r.duplicates == 2 and acks == [{P.SEQ: 0, P.STREAM: "up"}] * 2 and not r.backlog


def test_relay_numbers_each_upstream_stream_and_unnumbered_messages_on_streams_of_its_own():
    r, sent, _, _ = relay(window=8)
    unnumbered = {"type": "INPUT", "id": "frames", "metadata": {P.FRAME: 7}}
    for event in (data(5, "a"), data(5, "b"), unnumbered):
        r.on_event(event)
    for event in r.take(8):
        r.send("x", dict(event["metadata"]))
    streams = [m[P.STREAM] for _, m in sent]
    assert len(set(streams)) == 3 and [m[P.SEQ] for _, m in sent] == [5, 5, 0]
    assert sent[2][1][P.COUNT] == 0  # numbered here: open-ended


def test_relay_without_acks_passes_metadata_through():
    r, sent, _, _ = relay(reliable=False)
    r.on_event(data(3))
    r.send("x", dict(r.take(10)[0]["metadata"]))
    assert sent[0][1][P.STREAM] == "up" and sent[0][1][P.SEQ] == 3 and P.WANTS_ACK not in sent[0][1]


def test_relay_is_finished_when_its_input_closed_and_everything_is_acknowledged():
    r, sent, _, _ = relay(window=2)
    r.on_event(data(0))
    r.on_event({"type": "INPUT_CLOSED", "id": "frames"})  # dora hands this out before queued inputs
    assert not r.done()
    r.send("x", dict(r.take(1)[0]["metadata"]))
    assert not r.done()  # sent, not acknowledged
    r.on_event(ack(0, sent[0][1][P.STREAM]))
    assert r.done() and not r.finished(lambda: [data(1)])  # a message was queued behind INPUT_CLOSED
    r.send("y", dict(r.take(1)[0]["metadata"]))
    r.on_event(ack(1, sent[1][1][P.STREAM]))
    assert r.finished(lambda: []) and r.end_report() == 0


def test_relay_whose_consumer_goes_away_reports_what_it_could_not_deliver(caplog):
    r, _, _, _ = relay(window=2)
    r.on_event(data(0))
    r.send("x", dict(r.take(1)[0]["metadata"]))
    r.on_event({"type": "INPUT_CLOSED", "id": "ack"})
    assert r.gone == ["ack"]
    with caplog.at_level(logging.ERROR):
        assert r.end_report() == 1
    assert "1 of 1 messages not acknowledged (first: seq 0)" in caplog.text


def test_relay_drops_the_oldest_unacknowledgeable_message_past_its_backlog_limit(caplog):
    r, _, _, _ = relay(window=1)
    r.max_backlog = 3
    for seq in range(5):
        r.on_event(data(seq, wants_ack=False))
    assert [e["metadata"][P.SEQ] for e in r.backlog] == [2, 3, 4] and r.dropped == 2
    assert "its sender takes no acks" in caplog.text


def test_a_sink_handles_each_message_once_and_acknowledges_every_copy():
    sent = []
    intake = SinkIntake(sent.append)
    first = {"seq": 0, "stream": "s", "wants_ack": True}
    assert intake.is_new(first)
    intake.acknowledge(first)
    assert not intake.is_new(dict(first))  # a resend: skipped, acknowledged again
    intake.acknowledge(first)
    assert intake.is_new({"seq": 0, "stream": "other", "wants_ack": True}) and intake.is_new(
        {"frame": 3}
    )  # no acks wanted
    intake.acknowledge({"frame": 3})
    assert sent == [{"seq": 0, "stream": "s"}] * 2 and intake.duplicates == 1
    observer = SinkIntake(None)  # no ack output declared: nothing sent, duplicates still skipped
    assert observer.is_new(first) and not observer.is_new(first)
    observer.acknowledge(first)


# -- the consumer's queue: never more copies than it holds -------------------------------------


class DoraQueue:
    """One input queue as dora 1.1's node API keeps it: `capacity` messages, and past that the
    oldest is dropped ("Discarding event for input ..."), counted in `discarded`."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: deque = deque()
        self.discarded = 0

    def put(self, item) -> None:
        if len(self.items) >= self.capacity:
            self.items.popleft()
            self.discarded += 1
        self.items.append(item)


class OutboxProducer:
    """A producer (camera, tensor sender, JPEG relay: one way for all): messages made as the
    window has room, through an Outbox."""

    def __init__(self, count, put, clock, **window):
        self.count, self.made = count, 0
        self.box = Outbox(AckWindow(reliable=True, **window), lambda obj, metadata: put(dict(metadata)), log, clock)
        self.window = self.box.window

    def round(self):
        self.box.resend_due()
        while (not self.count or self.made < self.count) and self.box.room():
            self.box.send(self.made, {P.STREAM: "s", P.SEQ: self.made})
            self.made += 1

    def on_ack(self, ack):
        self.box.on_ack({"type": "INPUT", "id": "ack", "metadata": ack})

    @property
    def done(self):
        return self.made == self.count and not self.box.outstanding


def simulate(
    producer_class,
    *,
    count=60,
    queue=10,
    take_s=0.01,
    ack_delay_s=0.002,
    lose_first=0,
    until_s=20.0,
    step_s=0.001,
    **window,
):
    """A producer (WINDOW 8, RETRY_S 0.05) feeding a consumer that takes one message every
    `take_s` from a dora queue of `queue` (drop-oldest), acknowledging every copy it takes (the
    first of each message handled, the rest skipped as SinkIntake does) after `ack_delay_s`; the
    first `lose_first` copies sent never reach the queue (dropped on a congested link).
    -> (producer, queue, messages handled, when it ended)."""
    window = {"window": 8, "retry_s": 0.05, "give_up_s": 10.0, **window}
    clock = Clock()
    q = DoraQueue(queue)
    lost = [lose_first]

    def put(metadata):
        if lost[0] > 0:
            lost[0] -= 1
        else:
            q.put(metadata)

    producer = producer_class(count, put, clock, **window)
    acks: list = []
    intake = SinkIntake(lambda ack: acks.append((clock.now + ack_delay_s, ack)))
    handled: list = []
    next_take = 0.0
    while clock.now < until_s and not producer.done:
        producer.round()
        if q.items and clock.now >= next_take:
            metadata = q.items.popleft()
            if intake.is_new(metadata):
                handled.append(metadata[P.SEQ])
            intake.acknowledge(metadata)
            next_take = clock.now + take_s
        while acks and acks[0][0] <= clock.now:
            producer.on_ack(acks.pop(0)[1])
        clock.now = round(clock.now + step_s, 6)
    return producer, q, handled, clock.now


def test_without_the_bound_resends_overfill_a_slow_consumers_queue(producer_class=OutboxProducer):
    """What the producers did before transmissions were bounded (a capacity no queue has): the 8
    messages the window allows wait in the queue longer than RETRY_S, each is resent while its
    first copy is still queued, and dora drops the oldest copies."""
    producer, q, handled, _ = simulate(producer_class, capacity=1 << 30)
    assert sorted(handled) == list(range(60))  # the acks made good what was dropped...
    assert q.discarded > 0  # ...but dora had to drop


def test_a_slow_consumers_queue_never_holds_more_copies_than_it_can(producer_class=OutboxProducer):
    producer, q, handled, _ = simulate(producer_class, capacity=10)
    window = producer.window
    assert q.discarded == 0
    assert handled == list(range(60)) and window.delivered == 60 and not window.lost
    assert window.retransmits > 0 and window.held > 0  # resends happened, some waited for room
    assert window.probes == 0


def test_a_queue_smaller_than_the_window_is_still_never_overfilled(producer_class=OutboxProducer):
    """(A node refuses to start so; the bound holds anyway, e.g. with dora's default assumed.)"""
    producer, q, handled, _ = simulate(producer_class, queue=4, capacity=4)
    assert q.discarded == 0 and handled == list(range(60)) and not producer.window.lost


def test_a_link_whose_queued_copies_were_all_lost_restarts_with_a_probe(producer_class=OutboxProducer):
    """Every copy the count allows (10) lost on the way: no ack can come, the count stays full,
    and after PROBE_MIN_S of silence one resend goes anyway; its ack restarts the link."""
    producer, q, handled, ended = simulate(producer_class, capacity=10, lose_first=10)
    window = producer.window
    assert handled == list(range(60)) and not window.lost and q.discarded == 0
    assert window.probes == 1 and ended > 1.0


def test_a_consumer_that_takes_nothing_gets_probes_further_and_further_apart_then_is_given_up(
    producer_class=OutboxProducer,
):
    sent_at = []
    clock = Clock()

    def put(metadata):
        sent_at.append(clock.now)

    producer = producer_class(3, put, clock, window=8, retry_s=0.05, give_up_s=10.0, capacity=4)
    while clock.now < 12.0:
        producer.round()
        clock.now = round(clock.now + 0.001, 6)
    window = producer.window
    # 3 sent, 1 resend fills the count of 4; then probes 1, 2, 4 s apart; at 10 s all given up.
    gaps = [round(b - a, 3) for a, b in zip(sent_at[3:], sent_at[4:])]
    assert len(sent_at) == 4 + window.probes and window.probes == 3, sent_at
    assert gaps == [1.0, 2.0, 4.0], sent_at
    assert sorted(k if isinstance(k, int) else k[1] for k in window.lost) == [0, 1, 2] and not window.unacked


def test_a_resend_held_for_room_waits_for_the_next_ack_not_for_retry_s():
    box, sent, clock = outbox(window=2, capacity=2, retry_s=0.5)
    box.send("a", {P.STREAM: "s", P.SEQ: 0})
    box.send("b", {P.STREAM: "s", P.SEQ: 1})
    assert [m[P.TX] for _, m in sent] == [1, 2] and box.window.queued("ack") == 2
    clock.now = 0.5
    box.resend_due()  # both due; the queue is counted full
    assert len(sent) == 2 and box.window.held == 2
    assert box.window.next_due(0.5) == pytest.approx(0.5)  # the probe, PROBE_MIN_S after the last send
    box.on_ack(ack(0, "s", tx=1))  # copy 1 taken: room for one
    clock.now = 0.501
    box.resend_due()
    assert [(obj, m[P.TX]) for obj, m in sent[2:]] == [("b", 3)] and box.outstanding == 1


def test_a_new_message_queues_behind_while_the_consumers_queue_is_counted_full():
    box, sent, clock = outbox(window=4, capacity=2)
    for seq, obj in enumerate("abc"):
        box.send(obj, {P.STREAM: "s", P.SEQ: seq})
    assert [obj for obj, _ in sent] == ["a", "b"] and box.outstanding == 3 and box.sent == 3
    box.on_ack(ack(0, "s", tx=1))
    box.resend_due()  # its first transmission, now that there is room
    assert [obj for obj, _ in sent] == ["a", "b", "c"] and sent[2][1][P.TX] == 3 and box.window.retransmits == 0
    box.on_ack(ack(1, "s", tx=2))
    box.on_ack(ack(2, "s", tx=3))
    assert box.end_report("frames", planned=3) == 0


def test_a_held_message_dora_refuses_is_counted_lost_like_one_sent_at_once(caplog):
    box, sent, _ = outbox(window=4, capacity=1, fail=("b",))
    box.send("a", {P.STREAM: "s", P.SEQ: 0})
    box.send("b", {P.STREAM: "s", P.SEQ: 1})  # held
    box.on_ack(ack(0, "s", tx=1))
    box.resend_due()
    assert box.failed == 1 and box.sent == 1 and box.window.lost == [("s", 1)] and not box.kept
    assert "message 1 not sent: RuntimeError: dora says no" in caplog.text
    assert box.end_report("frames", planned=2) == 1


def test_with_several_consumers_each_queue_is_counted_on_its_own():
    box, sent, _ = outbox(window=4, capacity={"ack": 2, "ack_b": 10}, ackers=("ack", "ack_b"))
    for seq in range(3):
        box.send(seq, {P.STREAM: "s", P.SEQ: seq})
    assert len(sent) == 2  # ack's queue holds 2
    box.on_ack(ack(0, "s", "ack_b", tx=1))  # the other consumer taking makes no room in ack's queue
    box.resend_due()
    assert len(sent) == 2
    box.on_ack(ack(0, "s", "ack", tx=1))
    box.resend_due()
    assert len(sent) == 3 and box.window.queued("ack") == 2 and box.window.queued("ack_b") == 2


def test_a_relay_acknowledges_a_message_resent_while_it_waited_as_the_later_copy():
    r, _, acks, _ = relay(window=8)
    r.on_event(data(0, **{P.TX: 3}))
    r.on_event(data(0, **{P.TX: 9}))  # the resend, skipped: the first copy is taken, acked as tx 9
    r.on_event(data(1, **{P.TX: 10}))
    r.on_event(data(1, **{P.TX: "11"}))  # not a number: changes nothing
    r.take(8)
    assert acks == [{P.SEQ: 0, P.STREAM: "up", P.TX: 9}, {P.SEQ: 1, P.STREAM: "up", P.TX: 10}]


def test_the_output_of_a_relay_carries_its_own_tx_not_its_inputs():
    r, sent, _, _ = relay(window=8)
    r.on_event(data(0, **{P.TX: 41}))
    r.send("x", dict(r.take(1)[0]["metadata"]))
    assert sent[0][1][P.TX] == 1
    plain, sent, _, _ = relay(reliable=False)
    plain.on_event(data(0, **{P.TX: 41}))
    plain.send("x", dict(plain.take(1)[0]["metadata"]))
    assert P.TX not in sent[0][1]


# -- every ack is hostile ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "tx, echoed",
    [(5, 5), (0, 0), (None, None), ("5", None), (5.0, None), (True, None), (-1, None), (1 << 70, 1 << 70)],
)
def test_an_ack_echoes_the_tx_of_the_copy_taken_only_when_it_is_a_count(tx, echoed):
    metadata = {P.SEQ: 3, P.STREAM: "s", P.WANTS_ACK: True}
    if tx is not None:
        metadata[P.TX] = tx
    made = ack_for(metadata)
    assert made[P.SEQ] == 3 and made[P.STREAM] == "s"
    assert made.get(P.TX) == echoed and (P.TX in made) == (echoed is not None)


def window_with_resends():
    """Four messages sent (tx 1..4) and all resent (tx 5..8): message 2's copies are tx 3 and 7."""
    w = AckWindow(reliable=True, window=8, capacity=10)
    for seq in range(4):
        w.track(seq, 0.0)
        w.transmit(seq, 0.0)  # tx 1..4
    assert w.retransmissions(1.0) == [0, 1, 2, 3]  # resent as tx 5..8
    assert w.tx == 8 and w.queued("ack") == 8 and w.unacked[2].txs == [3, 7]
    return w


@pytest.mark.parametrize("tx, taken", [(None, 3), (3, 3), (7, 7)])
def test_an_ack_of_a_copy_sent_delivers_and_says_how_far_the_consumers_queue_got(tx, taken):
    """Without a tx, the message's first copy is what the ack proves gone."""
    w = window_with_resends()
    assert w.ack(2, "ack", tx) and w.acked_tx["ack"] == taken and w.queued("ack") == 8 - taken
    w.ack(2, "ack", tx)  # already delivered: says nothing more
    assert w.acked_tx["ack"] == taken and w.stray_acks == 1 and w.mismatched == 0


@pytest.mark.parametrize("tx", [0, 1, 4, 6, 8, 9, 1 << 70, "7", 7.0, True, -3, [3]])
def test_an_ack_whose_tx_is_no_copy_of_its_message_counts_for_nothing(tx):
    """A consumer echoing a stale tx (0, another message's), one from the future, or junk: the
    message stays unacknowledged (to be resent, and given up in time) and the count of the
    consumer's queue stays where it was, so no echo can freeze the window."""
    w = window_with_resends()
    assert not w.ack(2, "ack", tx)
    assert 2 in w.unacked and w.acked_tx["ack"] == 0 and w.mismatched == 1 and w.delivered == 0


def test_an_ack_of_a_message_never_transmitted_counts_for_nothing():
    """Held for room in a queue, it has no copy anywhere: an ack of it is a guess or a forgery."""
    w = AckWindow(reliable=True, window=8, capacity=1)
    w.track(0, 0.0)
    w.transmit(0, 0.0)
    w.track(1, 0.0)  # the queue is counted full: held
    assert w.retransmissions(0.5) == [] and w.held == 1
    assert not w.ack(1, "ack") and not w.ack(1, "ack", 1) and w.mismatched == 2 and 1 in w.unacked


def test_a_late_ack_moves_its_consumers_count_only_with_a_tx_sent_for_that_message():
    w = window_with_resends()
    assert w.ack(2, "ack", 3)
    assert not w.ack(2, "ack", 7) and w.acked_tx["ack"] == 7  # the resend's late ack: copies to 7 gone
    assert not w.ack(2, "ack", 8) and w.acked_tx["ack"] == 7  # tx 8 was message 3's: says nothing of 2's
    assert w.stray_acks == 2


def test_acks_never_move_a_consumers_count_back_nor_count_for_another_consumer():
    w = AckWindow(reliable=True, window=8, capacity=10, ackers=("ack", "ack_b"))
    for seq in range(3):
        w.track(seq, 0.0)
        w.transmit(seq, 0.0)
    w.ack(2, "ack", 3)
    w.ack(0, "ack", 1)  # late: changes nothing
    w.ack(1, "ack_other", 2)  # not an acker of this window
    assert w.acked_tx == {"ack": 3, "ack_b": 0}


def test_hostile_acks_on_an_outbox_are_applied_or_ignored_never_raise():
    box, sent, _ = outbox(window=4, capacity=4)
    for seq in range(2):
        box.send(seq, {P.STREAM: "s", P.SEQ: seq})
    for metadata in (
        {P.SEQ: 0, P.STREAM: "s", P.TX: "1"},
        {P.SEQ: 0, P.STREAM: "s", P.TX: -5},
        {P.SEQ: 0, P.STREAM: "s", P.TX: 10**30},
        {P.SEQ: 0, P.STREAM: "s", P.TX: None},
        {P.SEQ: 1, P.STREAM: "other", P.TX: 2},  # not our stream: ignored, tx included
        {P.SEQ: "1", P.STREAM: "s", P.TX: 2},
    ):
        assert box.on_ack({"type": "INPUT", "id": "ack", "metadata": metadata})
    assert box.window.acked_tx["ack"] == 1 and box.outstanding == 1  # message 0 (tx 1) delivered


# -- the window sized from the dataflow --------------------------------------------------------


def link_with_consumer(queue, *, window_node="sender", output="tensors", ack_source="receiver/ack", extra=()):
    """The Link of a FakeNode `sender` with an `ack` input from `ack_source` and `output` feeding
    receiver/tensors with the input spec `queue` (a dict of queue_size / queue_policy)."""
    descriptor = {
        "nodes": [
            {"id": window_node, "inputs": {"ack": ack_source}, "outputs": [output]},
            {"id": "receiver", "inputs": {"tensors": {"source": f"{window_node}/{output}", **queue}}},
            *extra,
        ]
    }
    node = FakeNode(node_id=window_node, outputs=[output], descriptor=descriptor)
    node._node_config["inputs"] = {"ack": {"source": ack_source, "queue_size": 256}}
    return Link.of(node)


def config(window=8):
    return SimpleNamespace(window=window, retry_s=1.0, ack_timeout_s=30.0)


def test_the_default_capacity_is_dora_s_rule_for_an_input_without_queue_settings():
    from tensor_codec.routing import queue_capacity

    assert DEFAULT_CAPACITY == queue_capacity(None, None) == 10
    assert AckWindow(reliable=True).capacity == {"ack": DEFAULT_CAPACITY}


def test_the_window_is_sized_to_the_consumers_queue(caplog):
    link = link_with_consumer({"queue_size": 16})
    with caplog.at_level(logging.WARNING):
        args = sized_window(link, config(), ["ack"], ["tensors"], log)
    assert args == {"window": 8, "retry_s": 1.0, "give_up_s": 30.0, "capacity": {"ack": 16}} and not caplog.text
    link = link_with_consumer({"queue_size": 4, "queue_policy": "backpressure"})
    assert sized_window(link, config(), ["ack"], ["tensors"], log)["capacity"] == {"ack": 100}


@pytest.mark.parametrize(
    "queue, window, words",
    [
        (
            {"queue_size": 4},
            8,
            "WINDOW=8 does not fit the queue of receiver/tensors, wired to output `tensors` and acknowledged on `ack`: "
            "queue_size 4, queue_policy drop_oldest (dora's default) holds 4 messages before dora drops the oldest, "
            "and an acknowledged output keeps up to WINDOW messages in that queue at once. Raise that input's "
            "queue_size to at least 8, or set WINDOW to at most 4.",
        ),
        ({}, 12, "queue_size 10 (dora's default), queue_policy drop_oldest (dora's default) holds 10 messages"),
        (
            {"queue_size": 5, "queue_policy": "backpressure"},
            120,
            "holds 100 messages before dora drops the oldest, and an acknowledged output keeps up to WINDOW messages "
            "in that queue at once. Raise that input's queue_size to at least 12 (backpressure holds 10 x "
            "queue_size, at least 100), or set WINDOW to at most 100.",
        ),
    ],
)
def test_a_window_that_does_not_fit_the_consumers_queue_refuses_to_start(queue, window, words):
    with pytest.raises(CannotStart) as refused:
        sized_window(link_with_consumer(queue), config(window), ["ack"], ["tensors"], log)
    assert words in str(refused.value)


def test_acks_from_a_node_further_down_are_bounded_by_the_smallest_queue_of_the_output():
    """examples/echo-passthrough.yml: the sender's acks come from the receiver behind the echo."""
    echo = {"id": "echo", "inputs": {"in": {"source": "sender/tensors", "queue_size": 6}}}
    link = link_with_consumer({"queue_size": 64}, ack_source="far/ack", extra=[echo])
    assert sized_window(link, config(window=6), ["ack"], ["tensors"], log)["capacity"] == {"ack": 6}
    link = link_with_consumer({"queue_size": 64}, extra=[echo])  # acks from receiver: its own queue
    assert sized_window(link, config(window=6), ["ack"], ["tensors"], log)["capacity"] == {"ack": 64}


def test_without_a_descriptor_dora_s_default_queue_is_assumed_and_said_once(caplog):
    link = Link.of(FakeNode(node_id="sender", inputs=["ack"], outputs=["tensors"], descriptor=None))
    with caplog.at_level(logging.WARNING):
        args = sized_window(link, config(window=16), ["ack"], ["tensors"], log)
    assert args["capacity"] == {"ack": DEFAULT_CAPACITY}  # not refused: nothing is known to be wrong
    assert caplog.text.count("assuming dora's default (queue_size 10, 10 messages) for ack") == 1
    assert sized_window(link, config(), [], ["tensors"], log) == {"window": 8, "retry_s": 1.0, "give_up_s": 30.0}


def test_a_sender_whose_window_does_not_fit_exits_with_status_2_saying_why(monkeypatch, caplog):
    from tensor_codec_nodes.common import startup
    from tensor_codec_nodes.common.loop import run
    from tensor_codec_nodes.tensor_sender.node import TensorSenderNode

    link = link_with_consumer({"queue_size": 4})
    monkeypatch.setattr(startup, "join_dataflow", lambda spec, log: link)
    for name in ("WINDOW", "COUNT", "MODE", "DEVICE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEVICE", "cpu")
    monkeypatch.setenv("COUNT", "3")
    with caplog.at_level(logging.ERROR):
        assert run(TensorSenderNode) == EXIT_BAD_CONFIG
    assert "WINDOW=8 does not fit the queue of receiver/tensors" in caplog.text and not link.node.sent


PRODUCER_PATHS = {"tc-camera-source", "tc-tensor-sender", "tc-jpeg-encoder", "tc-jpeg-decoder"}


@pytest.mark.parametrize(
    "flow", ["dataflow.yml", "dataflow-cluster.yml", *sorted(p.name for p in (ROOT / "examples").glob("*.yml"))]
)
def test_every_shipped_dataflow_has_acknowledged_windows_that_fit_their_consumers_queues(flow):
    path = ROOT / flow if (ROOT / flow).exists() else ROOT / "examples" / flow
    descriptor = yaml.safe_load(path.read_text())
    checked = 0
    for entry in descriptor["nodes"]:
        ackers = ackers_of(entry.get("inputs") or {})
        if entry.get("path") not in PRODUCER_PATHS or not ackers:
            continue
        outputs = [o for o in entry.get("outputs") or [] if o != P.ACK_OUTPUT]
        node = FakeNode(node_id=entry["id"], outputs=entry.get("outputs") or [], descriptor=descriptor)
        node._node_config["inputs"] = entry["inputs"]
        window = int((entry.get("env") or {}).get("WINDOW", 8))
        capacity = sized_window(Link.of(node), config(window), ackers, outputs, log)["capacity"]  # CannotStart: broken
        assert set(capacity) == set(ackers) and min(capacity.values()) >= window
        checked += 1
    if flow == "dataflow.yml":
        assert checked == 5  # camera, JPEG encoder and decoder, both senders


# -- liveness: whatever the consumer does, the producer transmits or ends ---------------------

LIVE = {"window": 8, "retry_s": 0.25, "give_up_s": 6.0, "capacity": 10}


def honest(metadata, _taken):
    return ack_for(metadata)


def silent_after(n):
    """Acknowledges the first `n` messages it takes, then stays alive and says nothing."""
    return lambda metadata, taken: ack_for(metadata) if taken <= n else None


def echoing_tx(tx_of):
    """Acknowledges every copy it takes, but with the tx `tx_of(copy's tx)` (a stale one)."""

    def consumer(metadata, _taken):
        made = ack_for(metadata)
        return None if made is None else {**made, P.TX: tx_of(metadata[P.TX])}

    return consumer


def run_link(consumer, *, count=40, until_s=120.0, outage=(0.0, 0.0), step_s=0.005, take_s=0.01):
    """An Outbox producer (LIVE's window; `count` messages, 0: endless) and a consumer taking one
    copy every `take_s` from a dora queue of 10 and answering each with `consumer(metadata, how
    many distinct messages it has taken)` (an ack, or None). Copies and acks sent during
    `outage` (start, end) are lost. -> (producer, when each copy was sent, (time, delivered so
    far) samples, when it ended or None)."""
    clock = Clock()
    q = DoraQueue(10)
    sent_at: list[float] = []

    def put(metadata):
        sent_at.append(clock.now)
        if not outage[0] <= clock.now < outage[1]:
            q.put(metadata)

    producer = OutboxProducer(count, put, clock, **LIVE)
    taken: set = set()
    acks: list = []
    delivered: list = []
    next_take = 0.0
    ended = None
    while clock.now < until_s:
        producer.round()
        if count and producer.done:
            ended = clock.now
            break
        if q.items and clock.now >= next_take:
            metadata = q.items.popleft()
            taken.add(metadata[P.SEQ])
            answer = consumer(metadata, len(taken))
            if answer is not None and not outage[0] <= clock.now < outage[1]:
                acks.append((clock.now + 0.002, answer))
            next_take = clock.now + take_s
        while acks and acks[0][0] <= clock.now:
            producer.on_ack(acks.pop(0)[1])
        delivered.append((clock.now, producer.window.delivered))
        clock.now = round(clock.now + step_s, 6)
    return producer, sent_at, delivered, ended


def longest_silence(sent_at, ended):
    """The longest time the producer went without transmitting, until it ended."""
    times = [0.0, *sent_at, ended]
    return max(b - a for a, b in zip(times, times[1:]))


@pytest.mark.parametrize(
    "consumer, acknowledged",
    [
        (silent_after(0), 0),
        (silent_after(24), 24),
        (echoing_tx(lambda tx: 0), 0),
        (echoing_tx(lambda tx: tx + 1000), 0),
        (echoing_tx(lambda tx: tx - 1), None),  # right now and then: when a resend follows its own copy
    ],
    ids=["silent", "silent after 24", "echoes tx 0", "echoes a tx never sent", "echoes the copy before's tx"],
)
def test_a_producer_transmits_or_ends_naming_what_was_lost_whatever_its_consumer_does(consumer, acknowledged, caplog):
    """The tensor sender wedged silently in the first three: it never probed with a new message,
    and an ack echoing a stale tx froze the count of the consumer's queue. The guarantee
    (docs/delivery.md): never silent for longer than ACK_TIMEOUT_S plus one probe period, and an
    end that names what was not acknowledged."""
    producer, sent_at, _, ended = run_link(consumer)
    window = producer.window
    assert ended is not None, f"still running after 120 s: {len(sent_at)} copies, {window.delivered} delivered"
    assert longest_silence(sent_at, ended) <= window.give_up_s + window.probe_max_s
    if acknowledged is not None:
        assert window.delivered == acknowledged
    assert window.delivered + len(window.lost) == 40
    with caplog.at_level(logging.ERROR):
        assert producer.box.end_report("messages", planned=40) == 1
    assert f"{40 - window.delivered} of 40 messages not acknowledged" in caplog.text


def test_an_echoed_tx_that_is_no_copy_of_the_message_is_counted_in_the_summary():
    producer, _, _, _ = run_link(echoing_tx(lambda tx: 0), count=10)
    assert producer.window.mismatched > 0 and producer.window.delivered == 0
    assert f"{producer.window.mismatched} acks naming a copy never sent" in producer.box.summary()


def test_an_honest_consumer_gets_everything_and_no_probe():
    producer, _, _, ended = run_link(honest)
    assert ended is not None and producer.window.delivered == 40 and not producer.window.lost
    assert producer.window.probes == 0 and producer.window.mismatched == 0


@pytest.mark.parametrize("outage_s", [3.0, 40.0, 200.0])
def test_an_outage_of_any_length_recovers_once_the_link_is_back(outage_s):
    """dora-rs/dora#3397: a link that drops everything for a while. A 40 s outage (past
    ACK_TIMEOUT_S) left the tensor sender delivering nothing for the next 260 s."""
    start, end = 2.0, 2.0 + outage_s
    producer, sent_at, delivered, _ = run_link(honest, count=0, until_s=end + 30.0, outage=(start, end))
    window = producer.window
    at_end = next(n for t, n in delivered if t >= end)
    back = next((t for t, n in delivered if n > at_end), None)
    assert back is not None, f"nothing delivered in the 30 s after a {outage_s:g} s outage"
    assert back - end <= window.probe_max_s + 1.0  # the first probe after the link is back
    assert longest_silence([t for t in sent_at if t < end + 30.0], end + 30.0) <= window.probe_max_s + 0.01
    assert delivered[-1][1] - at_end > 1000  # and then at full speed again


def test_probes_back_off_but_never_past_the_give_up_time():
    w = AckWindow(reliable=True, window=8, retry_s=0.5, give_up_s=7.0, capacity=1)
    assert w.probe_base_s == PROBE_MIN_S and w.probe_max_s == 7.0
    assert AckWindow(reliable=True, retry_s=2.0, give_up_s=1000.0).probe_max_s == 128.0  # 64 x the first wait
    assert AckWindow(reliable=True, retry_s=5.0, give_up_s=2.0).probe_max_s == 5.0  # never below the first


def test_the_transmissions_remembered_for_late_acks_stay_bounded():
    """A camera behind a backpressure queue of 100,000 ran for days: what it remembers of its
    transmissions (for the acks of messages no longer in flight) is what its consumers may still
    hold, at most RECENT_TX_MAX, and none every consumer is known to be past."""
    from tensor_codec_nodes.common.delivery import RECENT_TX_MAX

    assert AckWindow(reliable=True, capacity=1_000_000).recent_limit == RECENT_TX_MAX
    w = AckWindow(reliable=True, window=8, capacity=10, ackers=("ack", "ack_b"))
    for seq in range(100):
        w.track(seq, 0.0)
        tx = w.transmit(seq, 0.0)
        w.ack(seq, "ack", tx)
    assert len(w.recent) == 100  # ack_b said nothing: any of them may still be in its queue
    w.ack(0, "ack_b", 90)  # not message 0's copy: counts for nothing
    assert len(w.recent) == 100
    w.ack(89, "ack_b", 90)
    assert sorted(w.recent) == list(range(91, 101)) and w.acked_tx == {"ack": 100, "ack_b": 90}
