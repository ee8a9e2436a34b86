"""Acknowledged delivery: what makes a link of a dataflow lossless. No dora here (tested with a
fake clock); the nodes' main loops feed it events and send what it says.

Why: dora 1.1 does not guarantee delivery. A consumer's input queue holds `queue_size` messages
(10 when the dataflow gives none) and drops the oldest past it; `queue_policy: backpressure` only
raises that bound to 10 x `queue_size` (at least 100) and then drops the oldest too ("hit hard cap
..., dropping oldest"; a consumer taking 20 ms per message got 104 of 300 messages sent at once),
and the direct data plane drops messages when a link is congested (dora-rs/dora#3397).

How: a producer with acknowledgement inputs (ids starting with `ack`, each wired to a consumer's
`ack` output) numbers each message (`stream`, `seq`, `wants_ack`), keeps it until every one of
those consumers acknowledged it, and has at most `window` messages unacknowledged: a slow
consumer slows the producer down. A message unacknowledged for `retry_s` is sent again
(consumers skip the duplicate by `stream`/`seq` and acknowledge it again), and one unacknowledged
for `give_up_s` is given up: counted lost, and the producer exits non-zero saying how many.

The consumer's queue: resends add copies to it while the first ones may still be queued (a
consumer slower than `window` messages per `retry_s`), so bounding the unacknowledged messages
does not bound the copies queued. Every transmission (new or resent) therefore carries a number,
`tx`, strictly increasing per producer, and consumers echo it in their ack (`ack_for`). dora hands
an input's messages over in order, so an ack with tx=t from one acker says every copy numbered t
or less has left that consumer's queue (taken or dropped): at most (last tx sent) - (highest tx
it acknowledged) copies are still there. A transmission is made only while that count is below
what the consumer's queue holds (`capacity`, dora's rule: routing.queue_capacity), for every
acker; a resend that does not fit waits for the next ack (it is not lost: it is still given up
only after `give_up_s`). An ack without a `tx` (a consumer of its own that does not echo it)
says the copies up to the message's first transmission are gone; an ack whose `tx` is no
transmission of the message it names (stale, made up) counts for nothing at all. So dora never
has to drop. The node sizes `capacity` from the dataflow (`sized_window`): the smallest queue
among the inputs of that acker's node wired to the output, and refuses to start when `window`
does not fit it.

A stall: when every copy queued for a consumer was lost on the way (a congested direct link, an
outage), no ack can come and the count stays full. A consumer that acknowledged nothing for
max(`retry_s`, PROBE_MIN_S) since the last transmission, with its count full, gets one
transmission anyway (a probe: a resend, or a new message held for room), then again after twice
as long, and so on, never more than `give_up_s` apart, until an ack comes: a lost link restarts;
a consumer that is merely that slow (over a second per message) may see dora drop its oldest
queued copy, once per probe, which a later resend makes good.

Liveness, whatever the consumers do (silent, slow, gone, or echoing any `tx`): a producer with a
message to send transmits at least once every `probe_max_s` (at most `give_up_s`), and every
message is delivered or given up `give_up_s` after it was made; a producer with nothing left to
make ends once its messages are delivered or given up, with a non-zero exit naming what was not
acknowledged. An outage of any length recovers at the first probe after the link is back.

Consumers acknowledge a message when they have taken it (the receiver once it has handled it; the
JPEG encoder and decoder when they start work on it, so the window of the next link bounds how
many they take: see `Relay`). Acks travel as empty messages whose metadata is the acknowledged
`seq` and `stream`, and the `tx` of the copy taken.

Acks are hostile input like any other: one that is malformed (`malformed_ack`: a seq that is not
an int >= 0, a stream that is not a short string, a tx that is not an int) is refused, counted and
logged rate-limited (hostile.Refusals); one that names nothing in flight (a late duplicate, or
forged) is counted (`stray_acks`) and costs two dictionary lookups; one naming a message in
flight with a `tx` that is none of its transmissions is counted (`mismatched`) and changes
nothing. Per-stream state (the sequences a consumer has taken, a relay's streams) is bounded:
hostile.BoundedStreams.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from . import protocol as P
from .hostile import BoundedStreams, Refusals, shown
from .loop import CannotStart
from .manifest import Port
from .settings import Setting
from .stats import SeqTracker

if TYPE_CHECKING:  # tensor_codec loads torch: --help reads this module's settings before it
    from tensor_codec.dora import Link

__all__ = [
    "AckWindow",
    "Outbox",
    "Relay",
    "DELIVERY_SETTINGS",
    "DELIVERY_DOC",
    "ack_inputs_port",
    "ack_output_port",
    "ackers_of",
    "ack_for",
    "ack_sender",
    "window_of",
    "sized_window",
    "QueueBound",
    "queue_bounds",
    "window_refusal",
    "DEFAULT_CAPACITY",
    "PROBE_MIN_S",
    "SinkIntake",
    "STOP_GRACE_S",
    "EMPTY",
    "not_acknowledged_line",
    "window_figures",
    "malformed_ack",
    "MAX_STREAM_CHARS",
]

STOP_GRACE_S = 2.0  # after STOP: how long a producer still waits for acks of what it sent
# dora's default queue (queue_size 10, drop_oldest): tensor_codec.routing.queue_capacity(), which
# holds the rule (not imported here: --help reads this module's settings before torch loads).
DEFAULT_CAPACITY = 10
PROBE_MIN_S = 1.0  # a consumer silent this long (at least retry_s) with its queue counted full is probed
RECENT_TX = 1024  # transmissions remembered at least, for the acks of messages no longer in flight
RECENT_TX_MAX = 1 << 16  # and at most (a queue of 100,000 with backpressure would ask for 4 million)
EMPTY = pa.array([], type=pa.uint8())
MAX_BACKLOG = 256  # messages a relay holds taken from dora and not yet worked on (see Relay)
MAX_STREAM_CHARS = 64  # stream ids are 16 hex characters (protocol.new_stream_id); a longer one is not ours


# Where acknowledged delivery and its settings are documented, once, for every producer node.
DELIVERY_DOC = "docs/delivery.md"

# The settings of acknowledged delivery: one group, the same in every producer node (camera, tensor
# sender, JPEG encoder and decoder), whose settings tables include it as it is (`*DELIVERY_SETTINGS`),
# so names, defaults, help and bounds are written here only; a node's config then has window,
# retry_s and ack_timeout_s (`window_of`). DELIVERY_DOC says what they do; a test keeps its table
# of names and defaults in step with this one.
DELIVERY_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "WINDOW",
        "int",
        "8",
        "Acknowledged delivery (with an `ack*` input wired; docs/delivery.md): messages sent but not yet "
        "acknowledged, at most. It must fit the queue of every consumer input wired to the output (queue_size; "
        "10 x queue_size, at least 100, with queue_policy: backpressure; dora's default queue_size is 10), or the "
        "node refuses to start; resends are held back so that no queue ever holds more copies than that.",
        minimum=1,
    ),
    Setting(
        "RETRY_S",
        "float",
        "1.0",
        "Acknowledged delivery: resend a message unacknowledged for this many seconds (dora can drop messages "
        "on a congested link).",
        minimum=0.01,
    ),
    Setting(
        "ACK_TIMEOUT_S",
        "float",
        "30",
        "Acknowledged delivery: give up on a message unacknowledged for this many seconds (logged and counted; "
        "the node then exits with status 1).",
        minimum=0.1,
    ),
)


def window_of(config: Any) -> dict:
    """The AckWindow arguments of a node's DELIVERY_SETTINGS (its config's window, retry_s, ack_timeout_s)."""
    return {"window": config.window, "retry_s": config.retry_s, "give_up_s": config.ack_timeout_s}


# -- what a consumer's queue holds --------------------------------------------------------------


@dataclass(frozen=True)
class QueueBound:
    """What bounds the copies of this node's messages queued at one acker's consumer: `capacity`
    messages, from `consumer` (a routing.Consumer: the input of that acker's node, wired to
    `output`, with the smallest queue) or, `consumer` None, dora's default, the dataflow not
    saying."""

    acker: str
    capacity: int
    output: str | None = None
    consumer: Any = None


def _source_node(spec: Any) -> str | None:
    """The node an input is wired to ("receiver/ack" -> "receiver")."""
    source = spec.get("source") if isinstance(spec, dict) else spec
    if isinstance(source, str) and "/" in source:
        return source.split("/", 1)[0]
    return None


def queue_bounds(link: Link, ackers: Iterable[str], outputs: Iterable[str]) -> tuple[dict[str, QueueBound], str | None]:
    """-> ({acker: its QueueBound}, why the dataflow did not say, or None), read through the node's
    `link` (its wiring and its outputs' routes). An acker's consumer is the node its ack input is
    wired to; its bound is the smallest queue among that node's inputs wired to `outputs` (one
    copy of each transmission goes into each of them). Acks relayed from further down (the
    acker's node is not wired to `outputs`: examples/echo-passthrough.yml) are bounded by the
    smallest queue among every input wired to `outputs`. Where nothing is known: dora's default
    queue."""
    wired = link.config.get("inputs") or {}
    consumers: list[tuple[str, Any]] = []
    unknown = None
    for output in outputs:
        route = link.route(output)
        if route.unknown:
            unknown = f"output `{output}`: {route.unknown}"
        consumers += [(output, c) for c in route.consumers]
    if not consumers and unknown is None:
        unknown = f"no input is wired to {', '.join(f'`{o}`' for o in outputs) or 'the output'}"
    bounds = {}
    for acker in ackers:
        acker_node = _source_node(wired.get(acker))
        own = [oc for oc in consumers if oc[1].node == acker_node]
        pool = own or consumers
        if pool:
            output, consumer = min(pool, key=lambda oc: oc[1].capacity)
            bounds[acker] = QueueBound(acker, consumer.capacity, output, consumer)
        else:
            bounds[acker] = QueueBound(acker, DEFAULT_CAPACITY)
    return bounds, unknown if any(b.consumer is None for b in bounds.values()) else None


def window_refusal(window: int, bound: QueueBound) -> str:
    """Why a node with this WINDOW cannot start against `bound`'s queue, and the two cures."""
    from tensor_codec.routing import BACKPRESSURE

    c = bound.consumer
    if c.queue_policy == BACKPRESSURE:
        needed = f"{math.ceil(window / 10)} (backpressure holds 10 x queue_size, at least 100)"
    else:
        needed = str(window)
    return (
        f"WINDOW={window} does not fit the queue of {c.node}/{c.input}, wired to output `{bound.output}` and "
        f"acknowledged on `{bound.acker}`: {c.describe_queue()} holds {c.capacity} messages before dora drops the "
        f"oldest, and an acknowledged output keeps up to WINDOW messages in that queue at once. Raise that input's "
        f"queue_size to at least {needed}, or set WINDOW to at most {c.capacity}."
    )


def sized_window(link: Link, config: Any, ackers: Iterable[str], outputs: Iterable[str], log: logging.Logger) -> dict:
    """The AckWindow arguments of a node whose `outputs` are acknowledged on `ackers`: its config's
    window settings (`window_of`) and each acker's queue capacity, read from the dataflow through
    the node's `link` (`queue_bounds`; where it does not say, dora's default, logged once).
    Raises CannotStart (the node exits with status 2) when WINDOW does not fit a consumer's
    queue: `window_refusal`."""
    args = window_of(config)
    ackers = sorted(ackers)
    if not ackers:
        return args
    outputs = sorted(outputs)
    bounds, unknown = queue_bounds(link, ackers, outputs)
    if unknown is not None:
        log.warning(
            "the dataflow does not say how many messages the consumers' queues hold (%s): assuming dora's default "
            "(queue_size %d, %d messages) for %s",
            unknown,
            DEFAULT_CAPACITY,
            DEFAULT_CAPACITY,
            ", ".join(b.acker for b in bounds.values() if b.consumer is None),
        )
    short = [b for b in bounds.values() if b.consumer is not None and b.capacity < config.window]
    if short:
        raise CannotStart(window_refusal(config.window, min(short, key=lambda b: b.capacity)))
    args["capacity"] = {acker: bound.capacity for acker, bound in bounds.items()}
    return args


def ack_inputs_port(output: str, more: str = "") -> Port:
    """A producer's `ack*` inputs, acknowledging what it sends on `output`, as its spec declares
    them (optional: without, no acks): what acknowledged delivery does, the same for every producer
    (DELIVERY_SETTINGS), then `more`, what is the node's own."""
    description = (
        f"Optional. Acknowledged delivery ({DELIVERY_DOC}): one input per consumer of `{output}` whose id starts "
        f"with `{P.ACK_INPUT}` (`ack_receiver`, `ack_remote`, ...), wired to that consumer's `{P.ACK_OUTPUT}` "
        "output; a message is delivered when every one of them acknowledged it. At most WINDOW messages are "
        "unacknowledged (a slow consumer slows this node down instead of losing messages), one unacknowledged for "
        "RETRY_S is resent, one past ACK_TIMEOUT_S is given up; a run that ends with messages not acknowledged "
        "(given up, a consumer gone, STOP) exits with status 1 and logs how many."
    )
    return Port(f"{P.ACK_INPUT}*", f"{description} {more}".strip(), optional=True)


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


def _stream_of(metadata: dict) -> str | None:
    """A message's `stream` ("" when absent), or None when it is not a short string."""
    stream = metadata.get(P.STREAM, "")
    return stream if isinstance(stream, str) and len(stream) <= MAX_STREAM_CHARS else None


def _bad_ack_field(metadata: Any) -> str | None:
    """The first field of an ack's metadata that is not what this project's consumers send
    ("metadata", "seq", "stream" or "tx"), or None: type and length checks only, nothing
    formatted, so that a flood of malformed acks costs no more than a flood of well-formed ones."""
    if not isinstance(metadata, dict):
        return "metadata"
    seq = metadata.get(P.SEQ)
    if type(seq) is not int or seq < 0:
        return P.SEQ
    if _stream_of(metadata) is None:
        return P.STREAM
    tx = metadata.get(P.TX)
    if tx is not None and (type(tx) is not int or tx < 0):
        return P.TX
    return None


def malformed_ack(metadata: Any) -> str | None:
    """Why an ack's metadata is not one this project's consumers send (field, expected, got), or
    None when it is well formed (it may still name nothing in flight)."""
    field = _bad_ack_field(metadata)
    if field == "metadata":
        return f"metadata: expected a mapping, got {type(metadata).__name__}"
    if field == P.SEQ:
        return f"metadata.{P.SEQ}: expected an integer >= 0, got {shown(metadata.get(P.SEQ))}"
    if field == P.STREAM:
        stream = shown(metadata.get(P.STREAM))
        return f"metadata.{P.STREAM}: expected a string of at most {MAX_STREAM_CHARS} characters, got {stream}"
    if field == P.TX:
        return f"metadata.{P.TX}: expected an integer >= 0 (or absent), got {shown(metadata.get(P.TX))}"
    return None


def ack_for(metadata: dict) -> dict | None:
    """The ack to send for a message (its seq and stream, and the `tx` of this copy when it
    carries a usable one: an int, 0 or more), or None if its sender wants none (or numbered it
    in a way no ack could name: a seq that is not an int >= 0, a stream that is not a short string)."""
    seq = metadata.get(P.SEQ)
    stream = _stream_of(metadata)
    if metadata.get(P.WANTS_ACK) is not True or type(seq) is not int or seq < 0 or stream is None:
        return None
    ack = {P.SEQ: seq, P.STREAM: stream}
    tx = metadata.get(P.TX)
    if type(tx) is int and tx >= 0:
        ack[P.TX] = tx
    return ack


def ack_sender(link: Link) -> Callable[[dict], None] | None:
    """How a consumer sends an ack (see `ack_for`): on its `ack` output when the dataflow declares
    one (an empty dora message: no codec), else None (nobody waits for its acks)."""
    if P.ACK_OUTPUT not in link.declared_outputs():
        return None
    node = link.node
    return lambda ack: node.send_output(P.ACK_OUTPUT, EMPTY, ack)


class SinkIntake:
    """Acknowledged delivery into a sink (a node that ends a chain: tc-jpeg-sink, tc-rerun-sink):
    `is_new(metadata)` says whether a message is to be handled or is a resend already taken (its
    ack was lost or late); `acknowledge(metadata)`, once it is handled (or skipped), acks it on
    the sink's ack output when one is declared (`send_ack` None: a pure observer)."""

    def __init__(self, send_ack: Callable[[dict], None] | None):
        self.send_ack = send_ack
        self.seen: BoundedStreams[SeqTracker] = BoundedStreams(SeqTracker)
        self.duplicates = 0

    def is_new(self, metadata: dict) -> bool:
        ack = ack_for(metadata)
        if ack is not None and self.seen.state(ack[P.STREAM]).see(ack[P.SEQ]) == "duplicate":
            self.duplicates += 1
            return False
        return True

    def summary(self) -> str:
        """ ", N duplicates skipped, M streams forgotten" (what applies; "" when nothing)."""
        dup = f", {self.duplicates} duplicates skipped" if self.duplicates else ""
        forgot = (
            f", {self.seen.forgotten} streams forgotten (their duplicates may be taken again)"
            if self.seen.forgotten
            else ""
        )
        return dup + forgot

    def acknowledge(self, metadata: dict) -> None:
        ack = ack_for(metadata)
        if ack is not None and self.send_ack is not None:
            self.send_ack(ack)


def not_acknowledged_line(missing: int, total: int, what: str = "messages", first: Any = None) -> str:
    """The line a producer logs when it ends with messages not delivered."""
    tail = f" (first: {first})" if first is not None else ""
    return f"{missing} of {total} {what} not acknowledged{tail}"


@dataclass
class _Pending:
    """A message not yet acknowledged by every acker."""

    first: float  # when it was made: give_up_s counts from here
    last: float | None = None  # its last transmission (None: none yet, held for room in a queue)
    txs: list[int] = field(default_factory=list)  # the numbers of its transmissions, in order
    held: bool = False  # a transmission of it waited for room in a queue


class AckWindow:
    """Messages sent and not yet acknowledged by every acker, keyed by anything hashable, and the
    transmissions (`tx`) each acker's queue may still hold (the module's docstring says why).

    `capacity`: what each acker's consumer queue holds, an int for every acker or a mapping acker
    -> int (an acker not in it, or None: dora's default, DEFAULT_CAPACITY).

    Liveness: whatever the consumers do (silent, slow, gone, or echoing any `tx`), a window with
    a message to send transmits one at least every `probe_max_s` (a probe past a queue counted
    full), and gives up every message `give_up_s` after it was made; an ack counts only when its
    `tx` is a transmission of the message it names (`ack`), so no echo can freeze the count of
    a consumer's queue."""

    def __init__(
        self,
        *,
        reliable: bool,
        window: int = 8,
        retry_s: float = 1.0,
        give_up_s: float = 30.0,
        ackers=(P.ACK_INPUT,),
        capacity: int | Mapping[str, int] | None = None,
    ):
        self.reliable = reliable
        self.ackers = frozenset(ackers)  # the inputs that must each acknowledge a message
        self.window = window
        self.retry_s = retry_s
        self.give_up_s = give_up_s
        self.unacked: dict[Hashable, _Pending] = {}  # in the order the messages were made
        self.waiting_for: dict[Hashable, set[str]] = {}  # key -> ackers that have not acknowledged it
        self.retransmits = 0
        self.delivered = 0
        self.stray_acks = 0  # acks of nothing in flight: late duplicates (after a resend), or forged
        self.mismatched = 0  # acks naming a message in flight with a tx that is no transmission of it
        self.lost: list = []
        # The consumers' queues: transmissions numbered 1, 2, ... (`tx`: the last one given).
        if capacity is None or isinstance(capacity, int):
            capacity = dict.fromkeys(self.ackers, DEFAULT_CAPACITY if capacity is None else capacity)
        self.capacity = {a: max(1, int(capacity.get(a, DEFAULT_CAPACITY))) for a in self.ackers}
        self.tx = 0
        self.acked_tx = dict.fromkeys(self.ackers, 0)  # the highest tx each acker's consumer has taken
        # Recent transmissions (tx -> message), for the acks of messages no longer in flight: a
        # late duplicate's tx still says copies left its consumer's queue, if it is one this window
        # made for that message. Every copy a consumer may still hold is among the last
        # (its queue + its window) transmissions; four times that, between RECENT_TX and
        # RECENT_TX_MAX, and none every acker is known to be past. A late ack whose tx was
        # forgotten only leaves its count where it was, for a later ack or a probe to move.
        self.recent: dict[int, Hashable] = {}
        wanted = 4 * (max(self.capacity.values(), default=0) + window)
        self.recent_limit = min(RECENT_TX_MAX, max(RECENT_TX, wanted))
        self.probe_base_s = max(retry_s, PROBE_MIN_S)
        # Probes back off (twice as long after each unanswered one) up to 64 x the first wait, but
        # never past give_up_s: a sender with anything to send is never silent for longer.
        self.probe_max_s = max(self.probe_base_s, min(64 * self.probe_base_s, give_up_s))
        self.probe_s = dict.fromkeys(self.ackers, self.probe_base_s)
        # When each acker was last heard from (an ack that moved its tx on) or last sent to; None:
        # just now (set at the next look, which has the time).
        self.heard: dict[str, float | None] = dict.fromkeys(self.ackers)
        self.probes = 0  # transmissions past a silent consumer's count (see the module's docstring)
        self.held = 0  # messages whose transmission waited for room in a consumer's queue

    def room(self) -> int:
        """How many more messages may be made now (unbounded without acks: a large number)."""
        return max(0, self.window - len(self.unacked)) if self.reliable else 1 << 30

    # -- the consumers' queues --------------------------------------------------------------

    def queued(self, acker: str) -> int:
        """At most how many copies are still in that acker's consumer's queue."""
        return self.tx - self.acked_tx[acker]

    def _full_queues(self) -> list[str]:
        return [a for a in self.ackers if self.queued(a) >= self.capacity[a]]

    def _settle(self, now: float) -> None:
        for acker, heard in self.heard.items():
            if heard is None:
                self.heard[acker] = now

    def _probe_at(self, full: list[str], now: float) -> float:
        """When a transmission past those full queues is allowed (a probe: see the module)."""
        self._settle(now)
        return max(self.heard[a] + self.probe_s[a] for a in full)  # type: ignore[operator]

    def may_transmit(self, now: float | None = None) -> bool:
        """Whether one more copy fits every acker's consumer queue now; with `now`, also whether
        a probe is due past a consumer silent that long."""
        if not self.reliable:
            return True
        full = self._full_queues()
        if not full:
            return True
        return now is not None and now >= self._probe_at(full, now)

    def transmit(self, key: Hashable, now: float) -> int:
        """Number the transmission of message `key` about to be made now (its first, a resend,
        or a probe when a queue is counted full); -> its `tx`."""
        full = self._full_queues()
        self._settle(now)
        if full:
            self.probes += 1
            for acker in full:
                self.probe_s[acker] = min(self.probe_s[acker] * 2, self.probe_max_s)
        self.tx += 1
        for acker in self.ackers:
            self.heard[acker] = now
        self.recent[self.tx] = key
        if len(self.recent) > self.recent_limit:
            del self.recent[next(iter(self.recent))]
        pending = self.unacked.get(key)
        if pending is not None:
            pending.last = now
            pending.txs.append(self.tx)
        return self.tx

    def tx_of(self, key: Hashable) -> int | None:
        """The number of a message's last transmission (None: not sent yet, or no acks)."""
        pending = self.unacked.get(key)
        return pending.txs[-1] if pending is not None and pending.txs else None

    # -- messages ---------------------------------------------------------------------------

    def track(self, key: Hashable, now: float) -> None:
        """A message made now, not transmitted yet: due at once (`transmit` it now, or
        `retransmissions` sends it when its consumers' queues have room)."""
        if self.reliable:
            self.unacked[key] = _Pending(now)
            self.waiting_for[key] = set(self.ackers)

    def retransmissions(self, now: float) -> list:
        """Messages to send now, each numbered (`tx_of`): those unacknowledged for `retry_s` and
        those never sent, oldest first, while their consumers' queues have room (or a probe is
        due); those past `give_up_s` move to `lost` instead."""
        due = []
        for key, pending in list(self.unacked.items()):
            if now - pending.first >= self.give_up_s:
                del self.unacked[key]
                self.waiting_for.pop(key, None)
                self.lost.append(key)
            elif pending.last is None or now - pending.last >= self.retry_s:
                if not self.may_transmit(now):
                    if not pending.held:
                        pending.held = True
                        self.held += 1
                    continue  # waits for an ack to make room (or for a probe), still due
                if pending.last is not None:
                    self.retransmits += 1
                self.transmit(key, now)
                due.append(key)
        return due

    def next_due(self, now: float) -> float | None:
        """Seconds until the next transmission or give-up (None: nothing outstanding). A message
        due but held for room in a queue waits for an ack (an event) or the next probe."""
        if not self.unacked:
            return None
        give_up = min(p.first for p in self.unacked.values()) + self.give_up_s
        retry = min(now if p.last is None else p.last + self.retry_s for p in self.unacked.values())
        if retry <= now and not self.may_transmit():
            retry = self._probe_at(self._full_queues(), now)
        return max(0.0, min(retry, give_up) - now)

    def ack(self, key: Hashable, acker: str = P.ACK_INPUT, tx: Any = None) -> bool:
        """An ack of `key` from `acker`, carrying the `tx` of the copy it took as the consumer
        echoed it (None: it echoes none, and the message's first transmission is what the ack
        proves gone). -> True when this ack completed the message's delivery.

        An ack of a message in flight counts only if its `tx` is one of that message's
        transmissions (or it has none and the message was transmitted): any other counts for
        nothing (`mismatched`), so a consumer echoing a stale or made-up `tx` can neither mark
        a message delivered nor freeze the count of its queue. The `tx` of an ack that names
        nothing in flight (a late duplicate after a resend) still moves its consumer's count
        when it is a recent transmission of that message: without it, a queue counted full with
        nothing in flight would open only at the next probe. A lying acker can only mislead the
        count of its own consumer's queue: dora wires each ack input to one node."""
        pending = self.unacked.get(key)
        if pending is None:
            taken = tx if type(tx) is int and self.recent.get(tx) == key else None
        elif tx is None and pending.txs:
            taken = pending.txs[0]
        elif type(tx) is int and tx in pending.txs:
            taken = tx
        else:
            self.mismatched += 1
            return False
        if taken is not None and acker in self.acked_tx and taken > self.acked_tx[acker]:
            self.acked_tx[acker] = taken
            self.heard[acker] = None
            self.probe_s[acker] = self.probe_base_s
            self._forget_passed()
        waiting = self.waiting_for.get(key)
        if waiting is None:
            self.stray_acks += 1  # unknown, or already delivered: a late duplicate
            return False
        waiting.discard(acker)
        if waiting:
            return False
        del self.waiting_for[key]
        self.unacked.pop(key, None)
        self.delivered += 1
        return True

    def _forget_passed(self) -> None:
        """Drop the recent transmissions every acker's consumer is past: no ack can move a count
        with them any more."""
        floor = min(self.acked_tx.values())
        recent = self.recent
        while recent:
            oldest = next(iter(recent))
            if oldest > floor:
                return
            del recent[oldest]

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


# -- the one acknowledged output of every producer ----------------------------------------------


@dataclass
class _Kept:
    obj: Any
    metadata: dict


class Outbox:
    """One output with acknowledged delivery, the same for every producer (camera, tensor sender,
    JPEG encoder and decoder): every message is kept until all ackers acknowledged it, to be
    resent. `send(obj, metadata)` does the actual dora send (and may raise); `obj` is whatever
    it needs to send the message again (a frame, a JPEG, or just the seq of a message the
    tensor sender rebuilds).

    The node drives it the same way whatever it makes: `send` while `room()`, `on_ack` for
    every event, `resend_due` once per round (resends, messages held for room, probes,
    give-ups), `next_due` for how long it may wait, then `end_report`."""

    def __init__(
        self,
        window: AckWindow,
        send: Callable[[Any, dict], None],
        log: logging.Logger,
        clock: Callable[[], float],
        refusals: Refusals | None = None,
    ):
        self.window = window
        self._send = send
        self.log = log
        self.clock = clock
        self.refusals = refusals if refusals is not None else Refusals(log)
        self.kept: dict[tuple[str, Any], _Kept] = {}  # (stream, the sequence number the sender gave)
        # The streams this output numbered lately: an ack of one of them with nothing in flight (a
        # late duplicate) still says copies left the queue; an ack of another stream is not about
        # this output at all (a consumer acknowledges every producer it takes from on one `ack`
        # output, so its acks of another producer's stream, with that producer's tx, come here too).
        self.streams: BoundedStreams[int] = BoundedStreams(int)
        self._malformed_kinds = {acker: f"{acker}: malformed ack" for acker in window.ackers}
        self.sent = 0
        self.failed = 0
        self._held = False  # messages wait for their first transmission: new ones queue behind

    @property
    def reliable(self) -> bool:
        return self.window.reliable

    def room(self) -> int:
        return self.window.room()

    def send(self, obj: Any, metadata: dict) -> None:
        """Send one message the caller numbered (metadata `stream`, `seq`). If dora refuses it,
        the message is counted lost and the error raised for the caller to log. With acks, a
        message that finds a consumer's queue counted full (or messages held before it) is kept
        and sent by `resend_due` once there is room, or as a probe."""
        key: tuple[str, Any] = (str(metadata.get(P.STREAM, "")), metadata.get(P.SEQ))
        if not self.reliable:
            metadata[P.SENT_NS] = P.now_ns()
            try:
                self._send(obj, metadata)
            except Exception:
                self.failed += 1
                self.window.lost.append(key)
                raise
            self.sent += 1
            return
        metadata[P.WANTS_ACK] = True
        self.streams.state(key[0])
        now = self.clock()
        self.window.track(key, now)
        kept = self.kept[key] = _Kept(obj, metadata)
        self.sent += 1
        if self._held or not self.window.may_transmit():
            self._held = True  # due at once: its first transmission when there is room
            return
        self.window.transmit(key, now)
        self._transmit(key, kept)

    def _transmit(self, key: tuple[str, Any], kept: _Kept) -> None:
        """Send a kept message, numbered for this transmission (`AckWindow.transmit`). If dora
        refuses its first transmission, nobody can have it: it is counted lost (`failed`), and
        the error raised either way (a resend is tried again when due)."""
        first = P.TX not in kept.metadata
        kept.metadata[P.TX] = self.window.tx_of(key)
        kept.metadata[P.SENT_NS] = P.now_ns()
        try:
            self._send(kept.obj, kept.metadata)
        except Exception:
            if first:
                self.sent -= 1
                self.failed += 1
                self.window.forget(key)
                self.kept.pop(key, None)
            raise

    def on_ack(self, event: dict) -> bool:
        """An event on one of the ack inputs -> True (applied, refused, or not ours); False when
        it is not an ack at all. An ack is checked (`malformed_ack`: refused, counted, logged
        rate-limited) before anything of it is used; one of a stream this output did not number
        (another producer's, forged) is counted and costs nothing more."""
        if event.get("type") != "INPUT":
            return False
        acker = event.get("id")
        if not isinstance(acker, str) or acker not in self.window.ackers:
            return False
        metadata = event.get("metadata") or {}
        if _bad_ack_field(metadata) is not None:  # why, in words, only if it is logged
            self.refusals.refuse(self._malformed_kinds[acker], lambda: malformed_ack(metadata) or "")
            return True
        key = (metadata.get(P.STREAM, ""), metadata[P.SEQ])
        if key[0] not in self.streams and key not in self.window.waiting_for:
            self.window.stray_acks += 1  # not this output's: its tx counts nothing here
            return True
        if self.window.ack(key, acker, metadata.get(P.TX)):
            self.kept.pop(key, None)
        return True

    def resend_due(self) -> None:
        """Send what is due, as far as the consumers' queues have room: resends, messages held
        back at `send`, and a probe when one is due. A resend dora refuses is logged (and tried
        again later); a held message that dora refuses is counted lost, as at `send`."""
        now = self.clock()
        for key in self.window.retransmissions(now):
            kept = self.kept.get(key)
            if kept is None:
                continue
            first = P.TX not in kept.metadata
            try:
                self._transmit(key, kept)
            except Exception as e:
                self.log.error(
                    "message %s not %s: %s: %s",
                    P.label(kept.metadata),
                    "sent" if first else "resent",
                    type(e).__name__,
                    e,
                )
        self._held = any(p.last is None for p in self.window.unacked.values())
        for key in self.window.lost:
            self.kept.pop(key, None)

    def next_due(self) -> float | None:
        """Seconds until `resend_due` has something to do (None: nothing outstanding)."""
        return self.window.next_due(self.clock())

    @property
    def outstanding(self) -> int:
        return len(self.window.unacked)

    def summary(self) -> str:
        if not self.reliable:
            return f"{self.sent} sent"
        return f"{self.sent} sent, {self.window.delivered} acknowledged, {self.window.retransmits} resent, " + (
            f"{len(self.window.lost)} given up{window_figures(self.window)}"
        )

    def undelivered(self, planned: int = 0) -> tuple[list, int]:
        """What was not delivered: (the keys given up or still waiting, how many of `planned`
        were never sent at all)."""
        undelivered = list(self.window.lost) + list(self.window.unacked)
        return undelivered, max(0, planned - (self.sent + self.failed))

    def end_report(self, what: str = "messages", planned: int = 0) -> int:
        """At the end: log what was not delivered; -> the node's exit status (1 if anything).
        `planned`: how many the node meant to send (0: as many as it did), so those it never
        got to send count as not delivered too."""
        if not self.reliable:
            return 0
        undelivered, unsent = self.undelivered(planned)
        self.window.abandon()
        self.kept.clear()
        if not undelivered and not unsent:
            return 0
        seqs = [k[1] for k in undelivered if type(k[1]) is int]
        first = f"seq {min(seqs)}" if seqs else None
        attempted = self.sent + self.failed
        self.log.error("%s", not_acknowledged_line(len(undelivered) + unsent, max(planned, attempted), what, first))
        return 1


def window_figures(window: AckWindow) -> str:
    """What a window did besides sending and delivering, as a producer's summary adds it: ", N
    held for room in a queue, N probes of a silent consumer, N acks of nothing in flight, N acks
    of no copy sent" (what applies; "" when nothing)."""
    parts = [
        (window.held, "held for room in a queue"),
        (window.probes, "probes of a silent consumer"),
        (window.stray_acks, "acks of nothing in flight"),
        (window.mismatched, "acks naming a copy never sent"),
    ]
    return "".join(f", {n} {what}" for n, what in parts if n)


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
    it cannot be slowed down, so past `max_backlog` the oldest waiting is dropped, counted and
    logged. So is one past it from an upstream with acks, which keeps at most its window here (at
    most what this input's queue holds: relayed_output sizes `max_backlog` to that): it is not
    keeping its window, and it resends what was dropped.
    """

    def __init__(
        self,
        data_inputs: Iterable[str],
        outbox: Outbox,
        send_ack: Callable[[dict], None] | None,
        log: logging.Logger,
        max_backlog: int = MAX_BACKLOG,
    ):
        self.data_inputs = frozenset(data_inputs)
        self.outbox = outbox
        self.send_ack = send_ack
        self.log = log
        self.max_backlog = max_backlog
        self.backlog: deque[dict] = deque()
        self.waiting: dict[tuple[str, int], dict] = {}  # (stream, seq) of backlog messages -> their metadata
        self.seen: BoundedStreams[SeqTracker] = BoundedStreams(SeqTracker)  # upstream stream -> seqs taken
        self.closed: set[str] = set()
        self.gone: list[str] = []  # ack inputs that closed: that consumer is gone
        self.duplicates = 0
        self.dropped = 0
        self._streams: BoundedStreams[str] = BoundedStreams(P.new_stream_id)  # upstream stream -> this hop's
        self._own_seq = 0

    # -- events -----------------------------------------------------------------------------

    def on_event(self, event: dict) -> bool:
        """Apply one dora event (INPUT, INPUT_CLOSED; the rest is the node loop's); -> True if it
        was a data message (now in the backlog or skipped)."""
        if event.get("type") == "INPUT":
            return self.on_input(event)
        if event.get("type") == "INPUT_CLOSED":
            self.on_closed(str(event.get("id", "")))
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
            waiting = self.waiting.get(key)
            if waiting is not None:
                self.duplicates += 1  # resent before we took it: acknowledged when taken, as this copy
                tx = metadata.get(P.TX)  # (it left dora's queue after the first: its tx says more)
                if type(tx) is int and (type(waiting.get(P.TX)) is not int or tx > waiting[P.TX]):
                    waiting[P.TX] = tx
                return
            if tracker is not None and (key[1] < tracker.low or key[1] in tracker.above):
                self.duplicates += 1  # taken already, its ack lost or late: acknowledge again
                self._acknowledge(metadata)
                return
            self.waiting[key] = metadata
        if len(self.backlog) >= self.max_backlog:
            # A sender with acks keeps at most its window here; one without cannot be slowed down;
            # one that ignores its window is hostile. The oldest goes (a sender with acks resends it).
            dropped = self.backlog.popleft()
            dropped_metadata = dropped.get("metadata") or {}
            old = self._key(dropped_metadata)
            if old is not None:
                self.waiting.pop(old, None)
            self.dropped += 1
            self.outbox.refusals.refuse(
                f"{str(event.get('id'))[:64]}: backlog full",
                f"dropped message {P.label(dropped_metadata)[:40]}: {len(self.backlog)} waiting (at most "
                f"{self.max_backlog}) and its sender {'ignores its window' if old is not None else 'takes no acks'}",
            )
        self.backlog.append(event)

    @staticmethod
    def _key(metadata: dict) -> tuple[str, int] | None:
        ack = ack_for(metadata)  # one rule for what can be acknowledged
        return None if ack is None else (ack[P.STREAM], ack[P.SEQ])

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
        taken: list[dict] = []
        while self.backlog and len(taken) < limit:
            event = self.backlog.popleft()
            metadata = event.get("metadata") or {}
            key = self._key(metadata)
            if key is not None:
                self.waiting.pop(key, None)
                self.seen.state(key[0]).see(key[1])
            self._acknowledge(metadata)
            taken.append(event)
        return taken

    # -- output -----------------------------------------------------------------------------

    def number(self, metadata: dict) -> dict:
        """Give an output message its stream on this hop (the input's seq and count kept)."""
        for key in (P.WANTS_ACK, P.SENT_NS, P.TX):
            metadata.pop(key, None)
        seq = metadata.get(P.SEQ)
        upstream = metadata.get(P.STREAM)
        if type(seq) is int and seq >= 0 and isinstance(upstream, str) and len(upstream) <= MAX_STREAM_CHARS:
            stream = self._streams.state(upstream)
        else:
            stream = self._streams.state("")
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
            metadata.pop(P.TX, None)
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
        forgotten = self.seen.forgotten + self._streams.forgotten + self.outbox.streams.forgotten
        if forgotten:
            self.log.warning(
                "forgot %d streams (upstream %d, renumbered %d, own %d: the least recently used past %d each): a "
                "resend of a message of one may have been taken again, and its frames numbered afresh",
                forgotten,
                self.seen.forgotten,
                self._streams.forgotten,
                self.outbox.streams.forgotten,
                self.seen.limit,
            )
        return self.outbox.end_report()


def relayed_output(
    link: Link,
    ackers: list[str],
    data_input: str,
    output: str,
    send: Callable[[Any, dict], Any],
    config: Any,
    log: logging.Logger,
    refusals: Refusals,
) -> tuple[AckWindow, Outbox, Relay]:
    """The acknowledged delivery of a node that turns each message of `data_input` into one
    message of `output` (`send(payload, metadata)`): windowed when the output's consumers
    acknowledge (`ackers`, its `ack*` inputs; `config`'s window settings, sized to the consumers'
    queues: `sized_window`, which raises CannotStart when WINDOW does not fit them), with an `ack`
    output that acknowledges what it takes to its own sender; inputs refused are counted in
    `refusals`, the node's own (NodeLogic.refusals: what its end summary reports; a private one
    kept the decoder's refused acks out of it). -> (window, outbox, relay)."""
    from tensor_codec.routing import queue_capacity

    window = AckWindow(reliable=bool(ackers), ackers=ackers, **sized_window(link, config, ackers, [output], log))
    outbox = Outbox(window, send, log, time.monotonic, refusals)
    # An upstream with acks keeps at most its WINDOW here, which must fit this input's queue (it
    # refuses to start otherwise): past that queue's capacity, it is not keeping its window.
    backlog = max(MAX_BACKLOG, queue_capacity(*link.input_queue(data_input)))
    return window, outbox, Relay({data_input}, outbox, ack_sender(link), log, max_backlog=backlog)
