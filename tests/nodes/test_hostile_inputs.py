"""Every input a node takes is hostile (issue 31): acknowledgements, report metadata, per-stream
state, verification cost and the node loop itself, each refused, counted and bounded, and the
node going on. Each test here failed before its fix (the campaign's figures in the docstrings)."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import torch

import tensor_codec as tc
from tensor_codec.digest import content_digest
from tensor_codec.dora import Link
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.delivery import AckWindow, Outbox, Relay, SinkIntake, malformed_ack, relayed_output
from tensor_codec_nodes.common.hostile import FIRST_LOGGED, MAX_STREAMS, BoundedStreams, RateLimitedErrors, Refusals
from tensor_codec_nodes.common.loop import MAX_EVENTS_PER_ROUND, QUEUED_BOUND, EventLoop, NodeLogic
from tensor_codec_nodes.tensor_receiver import verify as verify_module
from tensor_codec_nodes.tensor_receiver.receiver import MAX_SEQ_GAP, Receiver
from tensor_codec_nodes.tensor_sender.config import load_config as sender_config
from tensor_codec_nodes.tensor_sender.node import TensorSenderNode, lost_report, summary_line
from tests.support.fakes import FakeNode

log = logging.getLogger("hostile-test")
CPU = torch.device("cpu")
NOW_NS = 1_800_000_000 * 10**9  # the receivers' clock in these tests


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def reliable_outbox(window=4):
    sent = []
    box = Outbox(AckWindow(reliable=True, window=window), lambda obj, md: sent.append(dict(md)), log, Clock())
    return box, sent


def ack_event(metadata, acker="ack"):
    return {"type": "INPUT", "id": acker, "metadata": metadata}


# ---------------------------------------------------------------------------------------- 1. acks
HOSTILE_ACKS = [
    {P.SEQ: 0, P.STREAM: ["a", "list"]},  # the campaign's: dora carries lists as lists
    {P.SEQ: 0, P.STREAM: {"a": 1}},
    {P.SEQ: "0", P.STREAM: "s"},
    {P.SEQ: True, P.STREAM: "s"},
    {P.SEQ: -1, P.STREAM: "s"},
    {P.SEQ: 0, P.STREAM: "s" * 10_000},
    {P.SEQ: 0, P.STREAM: "s", P.TX: [1]},
    {P.SEQ: 0, P.STREAM: "s", P.TX: -5},
]


@pytest.mark.parametrize(
    "metadata", HOSTILE_ACKS, ids=lambda m: f"{type(m[P.SEQ]).__name__}-{type(m[P.STREAM]).__name__}"
)
def test_a_malformed_ack_is_refused_counted_and_the_outbox_goes_on(metadata):
    """An ack whose stream is a list raised TypeError (unhashable) and killed the camera and the
    JPEG decoder."""
    box, sent = reliable_outbox()
    box.send("frame", {P.STREAM: "s", P.SEQ: 0})
    assert box.on_ack(ack_event(metadata)) is True
    assert box.refusals.total == 1 and "malformed ack" in box.refusals.summary()
    assert malformed_ack(metadata) is not None
    assert box.outstanding == 1  # nothing applied
    assert box.on_ack(ack_event({P.SEQ: 0, P.STREAM: "s", P.TX: sent[0][P.TX]}))  # a good one still works
    assert box.outstanding == 0 and box.window.delivered == 1


def started_sender(env, node=None):
    logic = TensorSenderNode(sender_config({"DEVICE": "cpu", **env}), CPU, log)
    logic.start(Link.of(node or FakeNode(node_id="sender", inputs=["ack"], outputs=["tensors"])))
    return logic


def test_the_tensor_sender_refuses_malformed_acks_and_counts_stray_ones():
    logic = started_sender({"COUNT": "2", "WINDOW": "1"})
    logic.work()
    stream = logic.sender.stream
    logic.on_input(ack_event({P.SEQ: 0, P.STREAM: [stream]}))
    logic.on_input(ack_event({P.SEQ: 99, P.STREAM: "someone else"}))
    logic.on_input(ack_event({P.SEQ: 99, P.STREAM: stream}))
    assert logic.refusals.total == 1 and logic.outbox.window.stray_acks == 2 and logic.outbox.outstanding
    logic.on_input(ack_event({P.SEQ: 0, P.STREAM: stream}))
    assert not logic.outbox.outstanding and logic.outbox.window.delivered == 1


def test_acks_naming_nothing_in_flight_are_counted_and_leave_the_window_alone():
    """437,882 forged acks: each is a lookup and a count, the messages in flight untouched."""
    box, sent = reliable_outbox(window=4)
    for seq in range(4):
        box.send(seq, {P.STREAM: "s", P.SEQ: seq})
    before = dict(box.window.waiting_for)
    for i in range(20_000):
        box.on_ack(ack_event({P.SEQ: 1000 + i, P.STREAM: "s" if i % 2 else "forged"}))
    assert box.window.stray_acks == 20_000 and box.refusals.total == 0
    assert box.window.waiting_for == before and box.outstanding == 4
    assert "20000 acks of nothing in flight" in box.summary()


class Flood(NodeLogic):
    """A node whose one input never stops (a forger), and whose own work must still run."""

    def __init__(self, rounds=50):
        super().__init__(None, None, log)
        self.events = 0
        self.works = 0
        self.rounds = rounds

    def wait(self):
        return 0

    def on_input(self, event):
        self.events += 1
        if event["metadata"].get("raise"):
            raise TypeError("unhashable type: 'list'")

    def work(self):
        self.works += 1

    def finished(self):
        return self.works >= self.rounds


class EndlessNode(FakeNode):
    """try_recv always has one more event: a sender flooding an input."""

    def __init__(self):
        super().__init__([], inputs=("ack",))
        self.n = 0

    def try_recv(self):
        self.n += 1
        return {"type": "INPUT", "id": "ack", "value": None, "metadata": {"raise": self.n % 3 == 0}}

    def next(self, timeout=None):
        return self.try_recv()


def test_a_flooded_input_neither_starves_the_nodes_work_nor_keeps_it_from_ending():
    """The forged-ack flood cut the sender from 1,607 to 67 messages/s: the loop read every
    queued event before the node's own work, and a flood is never drained."""
    logic = Flood(rounds=50)
    node = EndlessNode()
    EventLoop(Link.of(node), logic, log).run()  # ends: finished() with a bounded last look at the queue
    assert logic.works == 50
    assert logic.events <= 50 * MAX_EVENTS_PER_ROUND + QUEUED_BOUND
    assert logic.refusals.counts == {"ack: TypeError": logic.events // 3}  # raised, refused, went on


def test_refusals_are_logged_rate_limited(caplog):
    clock = Clock()
    refusals = Refusals(log, clock)
    with caplog.at_level(logging.ERROR, logger="hostile-test"):
        for i in range(10_000):
            clock.now = i * 0.001  # 10 s in all
            refusals.refuse("ack: malformed ack", f"reason {i}")
    assert refusals.total == 10_000
    assert FIRST_LOGGED < len(caplog.records) <= FIRST_LOGGED + 3  # one line per LOG_EVERY_S after the first
    assert "refused 10000 inputs: ack: malformed ack 10000" == refusals.summary()


# ----------------------------------------------------------------------------- 5. per-stream state
def test_per_stream_state_is_bounded_least_recently_used_first():
    forgotten = []
    streams: BoundedStreams[list] = BoundedStreams(list, limit=3, on_forget=lambda s, v: forgotten.append(s))
    for name in "abc":
        streams.state(name)
    streams.get("a")  # used: "b" is now the oldest
    streams.state("d")
    assert list(streams) == ["c", "a", "d"] and forgotten == ["b"] and streams.forgotten == 1


def test_a_relay_a_sink_and_a_receiver_keep_at_most_max_streams():
    """200,000 distinct streams grew the receiver and the JPEG nodes by 103 and 111 MB."""
    n = MAX_STREAMS * 8
    box, sent = reliable_outbox(window=10**6)
    relay = Relay({"frames"}, box, lambda ack: None, log, max_backlog=10**6)
    intake = SinkIntake(None)
    receiver = Receiver(CPU, "none", clock_ns=lambda: NOW_NS, inputs=["tensors"])
    value, codec = tc.encode(torch.zeros(1))
    for i in range(n):
        md = {P.SEQ: 0, P.STREAM: f"s{i}", P.WANTS_ACK: True, P.COUNT: 1}
        relay.on_input({"type": "INPUT", "id": "frames", "value": None, "metadata": dict(md)})
        for event in relay.take(1):
            relay.send("x", dict(event["metadata"]))
        intake.is_new(dict(md))
        receiver.handle({"type": "INPUT", "id": "tensors", "value": value, "metadata": {**codec, **md}})
    assert len(relay.seen) <= MAX_STREAMS and len(relay._streams) <= MAX_STREAMS
    assert len(intake.seen) <= MAX_STREAMS
    stats = receiver.inputs["tensors"]
    assert len(stats.streams) <= MAX_STREAMS and stats.to_dict()["streams_forgotten"] == n - MAX_STREAMS
    assert stats.received == n and stats.bad == 0


def test_a_relay_backlog_is_bounded_even_for_a_sender_that_ignores_its_window():
    box, sent = reliable_outbox()
    relay = Relay({"frames"}, box, lambda ack: None, log, max_backlog=8)
    for seq in range(100):
        md = {P.SEQ: seq, P.STREAM: "up", P.WANTS_ACK: True, P.COUNT: 100}
        relay.on_input({"type": "INPUT", "id": "frames", "value": None, "metadata": md})
    assert len(relay.backlog) == 8 and len(relay.waiting) == 8 and relay.dropped == 92
    assert box.refusals.counts == {"frames: backlog full": 92}


# --------------------------------------------------------------------------- 6. report metadata
def event(seq=None, *, stream="s", count=None, input_id="tensors", **extra):
    obj = torch.arange(4.0)
    value, metadata = tc.encode(obj)
    numbering = {P.SEQ: seq, P.STREAM: stream, P.COUNT: count, P.CHECKSUM: content_digest(obj), **extra}
    metadata.update({k: v for k, v in numbering.items() if v is not None})
    return {"type": "INPUT", "id": input_id, "value": value, "metadata": metadata}


@pytest.mark.parametrize(
    "hostile, field",
    [
        ({P.SEQ: 2**63 - 1}, P.SEQ),  # reported "missing 9223372036854775807"
        ({P.SEQ: 5}, P.SEQ),  # the stream's count is 5
        ({P.SEQ: "1"}, P.SEQ),
        ({P.SEQ: 1, P.COUNT: -1}, P.COUNT),
        ({P.SEQ: 1, P.COUNT: 7}, P.COUNT),  # the stream said 5
        ({P.SEQ: 1 + MAX_SEQ_GAP, P.COUNT: 0, P.STREAM: "open"}, P.SEQ),
        ({P.SEQ: 1, P.STREAM: ["s"]}, P.STREAM),
        ({P.SEQ: 1, P.SENT_NS: -(2**63)}, P.SENT_NS),  # reported "p50 1795719810947.41 ms"
        ({P.SEQ: 1, P.SENT_NS: NOW_NS + 3600 * 10**9}, P.SENT_NS),
        ({P.SEQ: 1, P.CAPTURE_NS: 1.5}, P.CAPTURE_NS),
    ],
)
def test_out_of_range_report_metadata_is_a_bad_message_not_a_statistic(hostile, field):
    receiver = Receiver(CPU, "full", clock_ns=lambda: NOW_NS, inputs=["tensors"])
    open_ended = hostile.get(P.STREAM) == "open"
    first = event(0, stream="open" if open_ended else "s", count=0 if open_ended else 5, sent_ns=NOW_NS - 10**6)
    assert receiver.handle(first) == "good"
    bad = event(0, stream="s", count=5)
    bad["metadata"].update(hostile)
    assert receiver.handle(bad) == "bad"
    stats = receiver.inputs["tensors"].to_dict()
    assert stats["bad"] == 1 and f"metadata.{field}:" in stats["failures"][0], stats["failures"]
    assert stats["missing"] <= 4  # the good message's stream only: 1 of 5 came
    assert stats["latency_ms"]["max"] == pytest.approx(1.0)


def test_in_range_metadata_from_a_clock_a_little_ahead_is_counted():
    receiver = Receiver(CPU, "full", clock_ns=lambda: NOW_NS, inputs=["tensors"])
    assert receiver.handle(event(0, count=2, sent_ns=NOW_NS + 10**9)) == "good"
    assert receiver.handle(event(1, count=2, sent_ns=NOW_NS - 10**9, capture_ns=NOW_NS - 2 * 10**9)) == "good"
    assert receiver.ok


# ------------------------------------------------------------------------- 7. verification cost
def test_a_broadcast_message_past_verify_max_bytes_is_not_checksummed(monkeypatch):
    """A 16 GiB-logical message of a few wire bytes cost the receiver's checksum 9-11 s."""
    # 16 GiB logical (four tensors at the codec's 4 GiB limit each), 16 bytes stored
    big = {f"t{i}": torch.zeros(1, dtype=torch.float32).expand(1 << 30) for i in range(4)}
    small = torch.zeros(8)
    value, metadata = tc.encode(big)
    metadata.update({P.SEQ: 0, P.COUNT: 1, P.STREAM: "b", P.CHECKSUM: "crc32:00000000"})

    def no_digest(obj):
        raise AssertionError("the checksum of a 16 GiB-logical message was computed")

    monkeypatch.setattr(verify_module, "content_digest", no_digest)
    receiver = Receiver(CPU, "full", clock_ns=lambda: NOW_NS, inputs=["tensors"])
    assert receiver.handle({"type": "INPUT", "id": "tensors", "value": value, "metadata": metadata}) == "unverified"
    why = receiver.inputs["tensors"].to_dict()["unverified_because"]
    assert any("VERIFY_MAX_BYTES" in reason and str(1 << 34) in reason for reason in why), why
    assert verify_module.logical_bytes({"a": [big, small]}) == (1 << 34) + 32


# ---------------------------------------------------------------------------- 8. sender summary
def test_the_sender_summary_counts_each_message_once():
    """It said "0 lost" beside "243 of 400 messages not acknowledged", and "4 messages sent"
    when 2 were never sent."""
    node = FakeNode(node_id="sender", inputs=["ack"], outputs=["tensors"], fail="dora says no", fail_times=2)
    logic = started_sender({"COUNT": "4", "WINDOW": "8"}, node)
    logic.work()
    logic.on_input(ack_event({P.SEQ: 2, P.STREAM: logic.sender.stream}))
    line = summary_line(logic.outbox, lost_report(logic.outbox, 4, log))
    assert line.startswith("2 messages sent, 2 could not be sent, 1 acknowledged, 3 not acknowledged"), line


def test_error_lines_logged_per_bad_message_are_paced_and_say_how_many_were_not_shown():
    clock = Clock()
    pacing = RateLimitedErrors(clock)
    records = []
    for i in range(1000):
        clock.now = i * 0.01  # 10 s in all
        record = logging.LogRecord("jpeg-decoder", logging.ERROR, __file__, 1, "bad JPEG skipped: %s", (i,), None)
        if pacing.filter(record):
            records.append(record.getMessage())
    assert FIRST_LOGGED < len(records) <= FIRST_LOGGED + 2, records
    assert "more like this in the last 5 s not shown" in records[-1]
    info = logging.LogRecord("x", logging.INFO, __file__, 1, "fine %s", (1,), None)
    paced = logging.LogRecord("x", logging.ERROR, __file__, 1, "refused %s", (1,), None)
    paced.paced = True
    assert all(pacing.filter(info) for _ in range(100)) and all(pacing.filter(paced) for _ in range(100))


def test_a_node_process_paces_its_error_lines():
    """In a node's own process (no logging set up before): 500 bad-message lines in a burst show as 10."""
    code = (
        "from tensor_codec_nodes.common.runtime import setup_logging\n"
        "log = setup_logging('tc-test')\n"
        "for i in range(500): log.error('bad frame skipped: %s', i)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if "bad frame skipped" in line]
    assert proc.returncode == 0 and len(lines) == FIRST_LOGGED, proc.stderr[-2000:]


def test_a_receiver_started_late_picks_an_open_ended_stream_up_where_it_is():
    """A camera's endless stream is at seq 2,000,000 after 18 hours at 30 fps: a receiver started
    then (or one that forgot the stream) counts from there; only a jump from there is refused."""
    receiver = Receiver(CPU, "full", clock_ns=lambda: NOW_NS, inputs=["tensors"])
    for seq in (2_000_000, 2_000_001, 2_000_003):
        assert receiver.handle(event(seq, stream="cam", count=0)) == "good"
    assert receiver.handle(event(2_000_003 + MAX_SEQ_GAP + 1, stream="cam", count=0)) == "bad"
    assert receiver.inputs["tensors"].to_dict()["bad"] == 1


def test_a_timestamp_out_of_range_is_a_bad_message_but_its_seq_is_counted_once():
    receiver = Receiver(CPU, "full", clock_ns=lambda: NOW_NS, inputs=["tensors"])
    assert receiver.handle(event(0, count=3)) == "good"
    assert receiver.handle(event(1, count=3, sent_ns=NOW_NS + 120 * 10**9)) == "bad"  # two minutes ahead
    assert receiver.handle(event(2, count=3, sent_ns=NOW_NS + 30 * 10**9)) == "good"  # a clock 30 s ahead: fine
    stats = receiver.inputs["tensors"].to_dict()
    assert (stats["received"], stats["bad"], stats["missing"]) == (3, 1, 0)  # bad, not also missing


def test_once_every_input_closed_everything_queued_is_dispatched():
    """dora hands out INPUT_CLOSED before the messages still queued behind it: the loop reads
    them all then (every sender is gone: finite), however many."""
    inputs = [{"type": "INPUT_CLOSED", "id": "a"}] + [
        {"type": "INPUT", "id": "a", "value": None, "metadata": {}} for _ in range(QUEUED_BOUND + 1000)
    ]
    node = FakeNode([*inputs, None], inputs=("a",))
    logic = Flood(rounds=10**9)
    logic.finished = lambda: False
    EventLoop(Link.of(node), logic, log).run()
    assert logic.events == QUEUED_BOUND + 1000


def test_an_exception_out_of_a_nodes_own_code_is_refused_with_its_traceback_and_counted_unexpected(caplog):
    logic = Flood(rounds=3)
    with caplog.at_level(logging.ERROR, logger="hostile-test"):
        EventLoop(Link.of(EndlessNode()), logic, log).run()
    assert logic.refusals.unexpected == logic.refusals.counts["ack: TypeError"] > 0
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "unhashable type" in caplog.text  # the first of its kind only


def test_at_the_end_of_a_run_the_lines_pacing_hid_are_counted_and_the_end_report_passes_whole():
    clock = Clock()
    pacing = RateLimitedErrors(clock)

    def record(i):
        return logging.LogRecord("tensor-sender", logging.ERROR, __file__, 1, "message %d was lost", (i,), None)

    shown_lines = sum(pacing.filter(record(i)) for i in range(25))
    assert shown_lines == FIRST_LOGGED
    assert pacing.settle() == [("message %d was lost", 25 - FIRST_LOGGED)]
    assert all(pacing.filter(record(i)) for i in range(25))


def test_a_relay_holds_what_its_input_queue_holds_from_an_upstream_with_acks():
    """WINDOW may be as large as the relay's input queue (backpressure: 10 x queue_size): such a
    sender's messages are not dropped as if it ignored its window."""
    descriptor = {
        "nodes": [
            {"id": "cam", "outputs": ["frames"]},
            {
                "id": "enc",
                "inputs": {"frames": {"source": "cam/frames", "queue_size": 64, "queue_policy": "backpressure"}},
            },
        ]
    }
    node = FakeNode(node_id="enc", inputs=["frames"], outputs=["jpeg"], descriptor=descriptor)
    link = Link.of(node)
    assert link.input_queue("frames") == (64, "backpressure")
    assert link.input_queue("other") == (None, None)
    _, _, relay = relayed_output(link, [], "frames", "jpeg", lambda *a: None, sender_config({}), log, Refusals(log))
    assert relay.max_backlog == 640


def test_a_message_in_flight_is_acknowledged_however_many_streams_came_after_it():
    """The streams an output numbers are kept least recently used first: one forgotten while a
    message of it is still in flight must not make its ack a stray (the message would be resent
    until given up)."""
    box, sent = reliable_outbox(window=MAX_STREAMS * 2)
    box.send("legit", {P.STREAM: "legit", P.SEQ: 0})
    for i in range(MAX_STREAMS + 10):
        box.send(i, {P.STREAM: f"other-{i}", P.SEQ: 0})
    assert "legit" not in box.streams
    box.on_ack(ack_event({P.SEQ: 0, P.STREAM: "legit", P.TX: sent[0][P.TX]}))
    assert box.window.delivered == 1 and box.window.stray_acks == 0


def test_the_streams_a_relay_or_a_sink_forgot_are_said_at_the_end(caplog):
    box, sent = reliable_outbox(window=10**6)
    relay = Relay({"frames"}, box, lambda ack: None, log, max_backlog=10**6)
    intake = SinkIntake(None)
    for i in range(MAX_STREAMS + 3):
        md = {P.SEQ: 0, P.STREAM: f"s{i}", P.WANTS_ACK: True, P.COUNT: 1}
        relay.on_input({"type": "INPUT", "id": "frames", "value": None, "metadata": dict(md)})
        for taken in relay.take(1):
            relay.send("x", dict(taken["metadata"]))
        intake.is_new(dict(md))
    assert intake.summary() == ", 3 streams forgotten (their duplicates may be taken again)"
    with caplog.at_level(logging.WARNING, logger="hostile-test"):
        relay.end_report()
    assert "forgot 9 streams (upstream 3, renumbered 3, own 3" in caplog.text


def test_a_flood_of_malformed_acks_is_counted_without_the_words_for_each():
    """A malformed ack's reason (a repr of what came: a 10 kB stream's took 18 us, more than dora's
    own cost of the event) is made only for the lines logged: the first FIRST_LOGGED of a kind."""
    from tensor_codec_nodes.common.hostile import FIRST_LOGGED

    class Stream(str):
        described = 0

        def __repr__(self):
            Stream.described += 1
            return super().__repr__()

    box, _ = reliable_outbox()
    for _ in range(1000):
        box.on_ack(ack_event({P.SEQ: 0, P.STREAM: Stream("s" * 10_000)}))
    assert box.refusals.counts == {"ack: malformed ack": 1000}
    assert Stream.described == FIRST_LOGGED
