"""Acknowledged delivery without dora (nodes/common/delivery.py): the window a producer keeps, and
the relay through the JPEG encoder and decoder, with a fake clock and fake events. The real
dataflows are in test_delivery_e2e.py."""

from __future__ import annotations

import logging

import pytest

from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.delivery import (
    AckWindow,
    Delivery,
    Outbox,
    Relay,
    SinkIntake,
    ack_for,
    ackers_of,
    not_acknowledged_line,
)

log = logging.getLogger("delivery-test")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def outbox(reliable=True, window=2, retry_s=1.0, give_up_s=5.0, ackers=("ack",), fail=()):
    sent = []

    def send(obj, metadata):
        if obj in fail:
            raise RuntimeError("dora says no")
        sent.append((obj, dict(metadata)))

    clock = Clock()
    box = Outbox(
        AckWindow(reliable=reliable, window=window, retry_s=retry_s, give_up_s=give_up_s, ackers=ackers),
        send,
        log,
        clock,
    )
    return box, sent, clock


def ack(seq, stream, acker="ack"):
    return {"type": "INPUT", "id": acker, "metadata": {P.SEQ: seq, P.STREAM: stream}}


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


def test_delivery_counts_every_message_not_acknowledged():
    d = Delivery(5, reliable=True, window=2, give_up_s=3.0)
    d.ack(d.take_new(0.0))
    d.take_new(0.0)
    d.retransmissions(3.0)  # seq 1 given up
    d.take_new(3.0)  # seq 2 unacknowledged when the node stops
    assert d.undelivered() == [1, 2, 3, 4]  # given up, waiting, never sent


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
