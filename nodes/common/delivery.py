"""Acknowledged delivery: what makes a link of a dataflow lossless. No dora here (tested with a
fake clock); the nodes' main loops feed it events and send what it says.

Why: dora 1.1 does not guarantee delivery. A consumer's input queue holds `queue_size` messages
and drops the oldest past it; `queue_policy: backpressure` only raises that bound to 10 x
`queue_size` (at least 100) and then drops the oldest too ("hit hard cap ..., dropping oldest";
a consumer taking 20 ms per message got 104 of 300 messages sent at once), and the direct data
plane drops messages when a link is congested (dora-rs/dora#3397).

How: a producer with acknowledgement inputs (ids starting with `ack`, each wired to a consumer's
`ack` output) numbers each message (`stream`, `seq`, `wants_ack`), keeps it until every one of
those consumers acknowledged it, and has at most `window` messages unacknowledged: a slow
consumer slows the producer down, and its queue never holds more than the window (plus
retransmissions), so dora never has to drop. A message unacknowledged for `retry_s` is sent again
(consumers skip the duplicate by `stream`/`seq` and acknowledge it again), and one unacknowledged
for `give_up_s` is given up: counted lost, and the producer exits non-zero saying how many.

Consumers acknowledge a message when they have taken it (the receiver once it has handled it; the
JPEG encoder and decoder when they start work on it, so the window of the next link bounds how
many they take: see `Relay`). Acks travel as empty messages whose metadata is the acknowledged
`seq` and `stream`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from . import protocol as P
from .manifest import Port
from .settings import Setting
from .stats import SeqTracker

__all__ = [
    "AckWindow",
    "Delivery",
    "Outbox",
    "Relay",
    "ack_settings",
    "ack_inputs_port",
    "ack_output_port",
    "ackers_of",
    "ack_for",
    "ack_sender",
    "window_of",
    "SinkIntake",
    "STOP_GRACE_S",
    "EMPTY",
    "not_acknowledged_line",
]

STOP_GRACE_S = 2.0  # after STOP: how long a producer still waits for acks of what it sent
EMPTY = pa.array([], type=pa.uint8())


def ack_settings(what: str = "message") -> tuple[Setting, ...]:
    """The settings of a node with acknowledged outputs (`what`: how its messages are called)."""
    return (
        Setting(
            "WINDOW",
            "int",
            "8",
            f"With an `ack*` input wired: {what}s sent but not yet acknowledged, at most; the consumer's queue_size "
            "should be at least twice this (retransmissions included).",
            minimum=1,
        ),
        Setting(
            "RETRY_S",
            "float",
            "1.0",
            f"With an `ack*` input wired: resend a {what} unacknowledged for this many seconds (dora can drop "
            "messages on a congested link).",
            minimum=0.01,
        ),
        Setting(
            "ACK_TIMEOUT_S",
            "float",
            "30",
            f"With an `ack*` input wired: give up on a {what} unacknowledged for this many seconds (logged and "
            "counted; the node then exits with status 1).",
            minimum=0.1,
        ),
    )


def window_of(config: Any) -> dict:
    """The AckWindow arguments of a node's `ack_settings` (its config's window, retry_s, ack_timeout_s)."""
    return {"window": config.window, "retry_s": config.retry_s, "give_up_s": config.ack_timeout_s}


def ack_inputs_port(description: str) -> Port:
    """A producer's `ack*` inputs, as its spec declares them (optional: without, no acks)."""
    return Port(f"{P.ACK_INPUT}*", description, optional=True)


def ack_output_port(what: str, when: str, wire_to: str, every: str = "each") -> Port:
    """A consumer's `ack` output, as its spec declares it: `every` `what` that wants an ack is
    acknowledged `when`; wire it to `wire_to`."""
    return Port(
        P.ACK_OUTPUT,
        f"Optional. When declared, {every} {what} whose metadata has wants_ack=true is acknowledged here{when}; wire "
        f"it to {wire_to}.",
        {"seq": f"the acknowledged {what}'s seq", "stream": "its stream"},
        optional=True,
    )


def ackers_of(inputs: Iterable[str]) -> list[str]:
    """The acknowledgement inputs among a node's declared inputs: ids starting with `ack`."""
    return sorted(i for i in inputs if i.startswith(P.ACK_INPUT))


def ack_for(metadata: dict) -> dict | None:
    """The ack to send for a message (its seq and stream), or None if its sender wants none."""
    seq = metadata.get(P.SEQ)
    if metadata.get(P.WANTS_ACK) is not True or type(seq) is not int:
        return None
    return {P.SEQ: seq, P.STREAM: str(metadata.get(P.STREAM, ""))}


def ack_sender(node: Any) -> Callable[[dict], None] | None:
    """How a consumer sends an ack (see `ack_for`): on its `ack` output when the dataflow declares
    one, else None (nobody waits for its acks)."""
    from .runtime import declared_outputs

    if P.ACK_OUTPUT not in declared_outputs(node):
        return None
    return lambda ack: node.send_output(P.ACK_OUTPUT, EMPTY, ack)


class SinkIntake:
    """Acknowledged delivery into a sink (a node that ends a chain: tc-jpeg-sink, tc-rerun-sink):
    `is_new(metadata)` says whether a message is to be handled or is a resend already taken (its
    ack was lost or late); `acknowledge(metadata)`, once it is handled (or skipped), acks it on
    the sink's ack output when one is declared (`send_ack` None: a pure observer)."""

    def __init__(self, send_ack: Callable[[dict], None] | None):
        self.send_ack = send_ack
        self.seen: dict[str, SeqTracker] = {}
        self.duplicates = 0

    def is_new(self, metadata: dict) -> bool:
        ack = ack_for(metadata)
        if ack is not None and self.seen.setdefault(ack[P.STREAM], SeqTracker()).see(ack[P.SEQ]) == "duplicate":
            self.duplicates += 1
            return False
        return True

    def acknowledge(self, metadata: dict) -> None:
        ack = ack_for(metadata)
        if ack is not None and self.send_ack is not None:
            self.send_ack(ack)


def not_acknowledged_line(missing: int, total: int, what: str = "messages", first: Any = None) -> str:
    """The line a producer logs when it ends with messages not delivered."""
    tail = f" (first: {first})" if first is not None else ""
    return f"{missing} of {total} {what} not acknowledged{tail}"


class AckWindow:
    """Messages sent and not yet acknowledged by every acker, keyed by anything hashable."""

    def __init__(
        self, *, reliable: bool, window: int = 8, retry_s: float = 1.0, give_up_s: float = 30.0, ackers=(P.ACK_INPUT,)
    ):
        self.reliable = reliable
        self.ackers = frozenset(ackers)  # the inputs that must each acknowledge a message
        self.window = window
        self.retry_s = retry_s
        self.give_up_s = give_up_s
        self.unacked: dict[Hashable, list[float]] = {}  # key -> [first send, last send]
        self.waiting_for: dict[Hashable, set[str]] = {}  # key -> ackers that have not acknowledged it
        self.retransmits = 0
        self.delivered = 0
        self.lost: list = []

    @property
    def full(self) -> bool:
        return self.reliable and len(self.unacked) >= self.window

    def room(self) -> int:
        """How many more messages may be sent now (unbounded without acks: a large number)."""
        return max(0, self.window - len(self.unacked)) if self.reliable else 1 << 30

    def track(self, key: Hashable, now: float) -> None:
        if self.reliable:
            self.unacked[key] = [now, now]
            self.waiting_for[key] = set(self.ackers)

    def retransmissions(self, now: float) -> list:
        """Messages to send again now; those past `give_up_s` move to `lost` instead."""
        due = []
        for key, times in list(self.unacked.items()):
            first, last = times
            if now - first >= self.give_up_s:
                del self.unacked[key]
                self.waiting_for.pop(key, None)
                self.lost.append(key)
            elif now - last >= self.retry_s:
                times[1] = now
                due.append(key)
        self.retransmits += len(due)
        return due

    def next_due(self, now: float) -> float | None:
        """Seconds until the next retransmission or give-up (None: nothing outstanding)."""
        if not self.unacked:
            return None
        return max(
            0.0, min(min(last + self.retry_s, first + self.give_up_s) for first, last in self.unacked.values()) - now
        )

    def ack(self, key: Hashable, acker: str = P.ACK_INPUT) -> bool:
        """-> True when this ack completed the message's delivery."""
        waiting = self.waiting_for.get(key)
        if waiting is None:
            return False  # unknown, or already delivered: a late duplicate
        waiting.discard(acker)
        if waiting:
            return False
        del self.waiting_for[key]
        self.unacked.pop(key, None)
        self.delivered += 1
        return True

    def forget(self, key: Hashable) -> None:
        """A message that could not be sent at all: count it lost, stop waiting for it."""
        self.waiting_for.pop(key, None)
        if self.unacked.pop(key, None) is not None or not self.reliable:
            self.lost.append(key)

    def abandon(self) -> list:
        """Stop waiting for everything outstanding (the node is ending); -> those keys."""
        keys = list(self.unacked)
        self.unacked.clear()
        self.waiting_for.clear()
        return keys


class Delivery(AckWindow):
    """The tensor sender's schedule: messages 0..total-1 (total 0 = endless), which are rebuilt
    from their seq when resent, so nothing but the seq is kept."""

    def __init__(
        self,
        total: int,
        *,
        reliable: bool,
        window: int = 8,
        retry_s: float = 1.0,
        give_up_s: float = 30.0,
        ackers=(P.ACK_INPUT,),
    ):
        super().__init__(reliable=reliable, window=window, retry_s=retry_s, give_up_s=give_up_s, ackers=ackers)
        self.total = total
        self.next_seq = 0

    @property
    def all_taken(self) -> bool:
        return bool(self.total) and self.next_seq >= self.total

    @property
    def finished(self) -> bool:
        return self.all_taken and not self.unacked

    def can_send_new(self) -> bool:
        return not self.all_taken and not self.full

    def take_new(self, now: float) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.track(seq, now)
        return seq

    def undelivered(self) -> list[int]:
        """Every message of the run not acknowledged: given up, still waiting, or never sent."""
        untaken = range(self.next_seq, self.total) if self.total else ()
        return sorted(set(self.lost) | set(self.unacked) | set(untaken))


# -- nodes that make their messages as they go --------------------------------------------------


@dataclass
class _Kept:
    obj: Any
    metadata: dict


class Outbox:
    """One output with acknowledged delivery, for a node that makes each message once (a camera
    frame, a JPEG, a decoded frame): every message is kept until all ackers acknowledged it, to be
    resent. `send(obj, metadata)` does the actual dora send (and may raise)."""

    def __init__(
        self, window: AckWindow, send: Callable[[Any, dict], None], log: logging.Logger, clock: Callable[[], float]
    ):
        self.window = window
        self._send = send
        self.log = log
        self.clock = clock
        self.kept: dict[tuple[str, int], _Kept] = {}
        self.streams: set[str] = set()
        self.sent = 0
        self.failed = 0

    @property
    def reliable(self) -> bool:
        return self.window.reliable

    def room(self) -> int:
        return self.window.room()

    def send(self, obj: Any, metadata: dict) -> None:
        """Send one message the caller numbered (metadata `stream`, `seq`). If dora refuses it,
        the message is counted lost and the error raised for the caller to log."""
        key = (str(metadata.get(P.STREAM, "")), metadata.get(P.SEQ))
        if self.reliable:
            metadata[P.WANTS_ACK] = True
            self.streams.add(key[0])
        metadata[P.SENT_NS] = P.now_ns()
        try:
            self._send(obj, metadata)
        except Exception:
            self.failed += 1
            self.window.lost.append(key)
            raise
        self.sent += 1
        if self.reliable:
            self.window.track(key, self.clock())
            self.kept[key] = _Kept(obj, metadata)

    def on_ack(self, event: dict) -> bool:
        """An event on one of the ack inputs -> True (applied, or not ours); False otherwise."""
        if event.get("type") != "INPUT" or event.get("id") not in self.window.ackers:
            return False
        metadata = event.get("metadata") or {}
        seq, stream = metadata.get(P.SEQ), metadata.get(P.STREAM)
        if type(seq) is int and stream in self.streams:
            key = (stream, seq)
            if self.window.ack(key, event["id"]):
                self.kept.pop(key, None)
        return True

    def resend_due(self) -> None:
        now = self.clock()
        for key in self.window.retransmissions(now):
            kept = self.kept.get(key)
            if kept is None:
                continue
            kept.metadata[P.SENT_NS] = P.now_ns()
            try:
                self._send(kept.obj, kept.metadata)
            except Exception as e:
                self.log.error("message %s not resent: %s: %s", P.label(kept.metadata), type(e).__name__, e)
        for key in self.window.lost:
            self.kept.pop(key, None)

    @property
    def outstanding(self) -> int:
        return len(self.window.unacked)

    def summary(self) -> str:
        if not self.reliable:
            return f"{self.sent} sent"
        return (
            f"{self.sent} sent, {self.window.delivered} acknowledged, {self.window.retransmits} resent, "
            f"{len(self.window.lost)} given up"
        )

    def end_report(self, what: str = "messages", planned: int = 0) -> int:
        """At the end: log what was not delivered; -> the node's exit status (1 if anything).
        `planned`: how many the node meant to send (0: as many as it did), so those it never
        got to send count as not delivered too."""
        if not self.reliable:
            return 0
        undelivered = list(self.window.lost) + self.window.abandon()
        self.kept.clear()
        attempted = self.sent + self.failed
        unsent = max(0, planned - attempted)
        if not undelivered and not unsent:
            return 0
        seqs = [k[1] for k in undelivered if type(k[1]) is int]
        first = f"seq {min(seqs)}" if seqs else None
        self.log.error("%s", not_acknowledged_line(len(undelivered) + unsent, max(planned, attempted), what, first))
        return 1


class Relay:
    """Acknowledged delivery through a node that turns each input message into (at most) one
    output message: the JPEG encoder and decoder.

    Input side: a message taken from dora is held in a backlog; the node `take`s messages from it
    only while its output has room (`Outbox.room()` less what is still being worked on), and
    acknowledges each upstream (on its `ack` output) when it takes it. So a slow consumer
    downstream fills this node's output window, this node stops taking, its upstream's window
    fills, and the producer at the head of the chain waits: nothing is dropped anywhere.
    Duplicates (retransmissions) are skipped by `stream`/`seq` and acknowledged again.

    Output side: each output message keeps the input's `seq` and `count` (so a receiver at the
    end can count what the chain lost, end to end) under a `stream` of this node's own per input
    stream (so acks of this hop are never mistaken for those of another); messages that carried
    no seq are numbered on a stream of their own.

    A message from an upstream that wants no acks (a plain dora node) is taken as it comes:
    it cannot be slowed down, so past `max_backlog` the oldest waiting is dropped, logged.
    """

    def __init__(
        self,
        data_inputs: Iterable[str],
        outbox: Outbox,
        send_ack: Callable[[dict], None] | None,
        log: logging.Logger,
        max_backlog: int = 256,
    ):
        self.data_inputs = frozenset(data_inputs)
        self.outbox = outbox
        self.send_ack = send_ack
        self.log = log
        self.max_backlog = max_backlog
        self.backlog: deque[dict] = deque()
        self.waiting: set[tuple[str, int]] = set()  # (stream, seq) of backlog messages
        self.seen: dict[str, SeqTracker] = {}
        self.closed: set[str] = set()
        self.gone: list[str] = []  # ack inputs that closed: that consumer is gone
        self.duplicates = 0
        self.dropped = 0
        self._streams: dict[str, str] = {}
        self._own_seq = 0

    # -- events -----------------------------------------------------------------------------

    def on_event(self, event: dict) -> bool:
        """Apply one dora event (INPUT, INPUT_CLOSED; the rest is the node loop's); -> True if it
        was a data message (now in the backlog or skipped)."""
        if event.get("type") == "INPUT":
            return self.on_input(event)
        if event.get("type") == "INPUT_CLOSED":
            self.on_closed(event.get("id"))
        return False

    def on_input(self, event: dict) -> bool:
        """An INPUT event: an ack (applied), or a data message (-> True: in the backlog or skipped)."""
        if self.outbox.on_ack(event):
            return False
        if event.get("id") in self.data_inputs:
            self._arrived(event)
            return True
        return False

    def on_closed(self, input_id: str) -> None:
        if input_id in self.data_inputs:
            self.closed.add(input_id)
        elif input_id in self.outbox.window.ackers and self.outbox.reliable:
            self.gone.append(input_id)

    def _arrived(self, event: dict) -> None:
        metadata = event.get("metadata") or {}
        key = self._key(metadata)
        if key is not None:
            tracker = self.seen.get(key[0])
            if key in self.waiting:
                self.duplicates += 1  # resent before we took it: acknowledged when taken
                return
            if tracker is not None and (key[1] < tracker.low or key[1] in tracker.above):
                self.duplicates += 1  # taken already, its ack lost or late: acknowledge again
                self._acknowledge(metadata)
                return
            self.waiting.add(key)
        elif len(self.backlog) >= self.max_backlog:
            dropped = self.backlog.popleft()
            self.dropped += 1
            self.log.error(
                "dropped message %s: %d waiting and its sender takes no acks",
                P.label(dropped.get("metadata") or {}),
                len(self.backlog),
            )
        self.backlog.append(event)

    @staticmethod
    def _key(metadata: dict) -> tuple[str, int] | None:
        seq = metadata.get(P.SEQ)
        if metadata.get(P.WANTS_ACK) is not True or type(seq) is not int or seq < 0:
            return None
        return (str(metadata.get(P.STREAM, "")), seq)

    def _acknowledge(self, metadata: dict) -> None:
        ack = ack_for(metadata)
        if ack is not None and self.send_ack is not None:
            try:
                self.send_ack(ack)
            except Exception as e:
                self.log.error("could not acknowledge message %s: %s: %s", P.label(metadata), type(e).__name__, e)

    # -- taking work ------------------------------------------------------------------------

    def room(self, busy: int = 0) -> int:
        """Input messages that may be taken now, `busy` being those taken and not sent yet."""
        return max(0, self.outbox.room() - busy)

    def take(self, limit: int) -> list[dict]:
        """Up to `limit` messages from the backlog, in arrival order, each acknowledged upstream."""
        taken = []
        while self.backlog and len(taken) < limit:
            event = self.backlog.popleft()
            metadata = event.get("metadata") or {}
            key = self._key(metadata)
            if key is not None:
                self.waiting.discard(key)
                self.seen.setdefault(key[0], SeqTracker()).see(key[1])
            self._acknowledge(metadata)
            taken.append(event)
        return taken

    # -- output -----------------------------------------------------------------------------

    def number(self, metadata: dict) -> dict:
        """Give an output message its stream on this hop (the input's seq and count kept)."""
        for key in (P.WANTS_ACK, P.SENT_NS):
            metadata.pop(key, None)
        seq = metadata.get(P.SEQ)
        upstream = metadata.get(P.STREAM)
        if type(seq) is int and seq >= 0 and isinstance(upstream, str):
            stream = self._streams.get(upstream)
            if stream is None:
                stream = self._streams[upstream] = P.new_stream_id()
        else:
            stream = self._streams.get("")
            if stream is None:
                stream = self._streams[""] = P.new_stream_id()
            metadata[P.SEQ] = self._own_seq
            metadata[P.COUNT] = 0
            self._own_seq += 1
        metadata[P.STREAM] = stream
        return metadata

    def send(self, obj: Any, metadata: dict) -> None:
        """Send one output message (raises as Outbox.send does). With acks it is numbered for
        this hop first; without, its metadata goes on as the node made it."""
        if not self.outbox.reliable:
            metadata.pop(P.WANTS_ACK, None)  # the input's sender's, not this node's
        self.outbox.send(obj, self.number(metadata) if self.outbox.reliable else metadata)

    # -- ending -----------------------------------------------------------------------------

    @property
    def inputs_done(self) -> bool:
        return self.data_inputs <= self.closed and not self.backlog

    def done(self, busy: int = 0) -> bool:
        """Nothing more to do: every data input closed, nothing waiting or being worked on, and
        everything sent acknowledged (or given up)."""
        return self.inputs_done and not busy and not self.outbox.outstanding

    def finished(self, poll: Callable[[], list[dict]], busy: int = 0) -> bool:
        """`done`, after one last look at what dora has queued (`poll`: every queued event,
        without blocking): dora's scheduler hands out INPUT_CLOSED before the inputs still
        queued, so a message may follow it."""
        if not self.done(busy):
            return False
        for event in poll():
            self.on_event(event)
        return self.done(busy)

    def end_report(self) -> int:
        """Log what was not delivered; -> the node's exit status (1 if anything was not)."""
        if self.gone:
            self.log.error("%s closed: that consumer went away", ", ".join(self.gone))
        return self.outbox.end_report()


def relayed_output(
    node: Any, ackers: list[str], data_input: str, send: Callable[[Any, dict], Any], config: Any, log: logging.Logger
) -> tuple[AckWindow, Outbox, Relay]:
    """The acknowledged delivery of a node that turns each message of `data_input` into one
    output message (`send(payload, metadata)`): windowed when the output's consumers acknowledge
    (`ackers`, its `ack*` inputs; `config`'s window settings), with an `ack` output that
    acknowledges what it takes to its own sender. -> (window, outbox, relay)."""
    window = AckWindow(reliable=bool(ackers), ackers=ackers, **window_of(config))
    outbox = Outbox(window, send, log, time.monotonic)
    return window, outbox, Relay({data_input}, outbox, ack_sender(node), log)
