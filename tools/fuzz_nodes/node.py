"""The hostile dora node (`python -u -m tools.fuzz_nodes.node`, the repository on PYTHONPATH):
real traffic through the node under test, hostile inputs between it, and a JSON record of what
it sent, per category and per bucket (schedule.py), for the runner to hold the node's counts to.

Two ways of taking part, by TARGET:

- sender, camera, encoder-ack, decoder-ack (`acker`): subscribed to the producer's output as one
  of its consumers, it acknowledges every message once (its first copy) on its `ack` output, and
  before each ack sends that message's burst of hostile acks. While the middle half of the real
  messages goes through (schedule.flood_span) it floods: acks of a stream nothing sent, FLOOD_RATE
  per second, sent whether or not a message came (a sustained flood, not a burst per message).
  The producer is done only once the last message is acknowledged, and dora hands an input's
  messages over in order, so the producer has read every hostile ack before it ends.
- receiver and monitor (`tensors`), decoder and sink (`jpeg`), encoder (`frames`): it is the producer: good
  messages (numbered, wanting an ack) with hostile ones between them, one good message at a time
  (the next goes once the node acknowledged the last: the node's queue never holds more than one
  burst, so dora drops nothing).

Settings (env): TARGET, SEED, HOSTILE (hostile items), FLOOD_RATE (flood acks per second), REAL (real messages:
the producer's count, or the good messages this node sends), WINDOW (the producer's: hostile
acks start past it, see schedule.bursts), RESULT (the JSON record's path), ACK_WAIT_S, and
MISCOUNT (a bucket this node claims one more of than it sent: the runner's self-test).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dora import Node

from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.delivery import ack_for
from tensor_codec_nodes.common.loop import is_timeout

from . import forge
from .schedule import ACK_TARGETS, FLOOD, TARGETS, Item, bursts, flood_span, plan


@dataclass
class Settings:
    target: str
    seed: int
    hostile: int
    flood_rate: int
    real: int
    window: int
    result: Path
    ack_wait_s: float
    miscount: str

    @classmethod
    def from_env(cls, env) -> Settings:
        return cls(
            target=env["TARGET"],
            seed=int(env.get("SEED", "0")),
            hostile=int(env.get("HOSTILE", "40")),
            flood_rate=int(env.get("FLOOD_RATE", "0")),
            real=int(env["REAL"]),
            window=int(env.get("WINDOW", "8")),
            result=Path(env["RESULT"]),
            ack_wait_s=float(env.get("ACK_WAIT_S", "60")),
            miscount=env.get("MISCOUNT", ""),
        )


class Record:
    """What was sent, for the JSON record."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.categories: collections.Counter[str] = collections.Counter()
        self.buckets: collections.Counter[str] = collections.Counter()
        self.extra: dict = {}
        self.started = time.monotonic()

    def sent(self, item: Item) -> None:
        self.categories[item.category.name] += 1
        self.buckets[item.category.bucket] += 1

    def write(self) -> None:
        s = self.settings
        buckets = dict(self.buckets)
        if s.miscount:  # the self-test: a claim the node under test cannot match
            buckets[s.miscount] = buckets.get(s.miscount, 0) + 1
        record = {
            "target": s.target,
            "seed": s.seed,
            "hostile": s.hostile,
            "flood_rate": s.flood_rate,
            "real": s.real,
            "sent": dict(self.categories),
            "buckets": buckets,
            "miscount": s.miscount or None,
            "wall_s": round(time.monotonic() - self.started, 3),
            **self.extra,
        }
        s.result.parent.mkdir(parents=True, exist_ok=True)
        s.result.write_text(json.dumps(record, indent=1))


class Flood:
    """Acks of a stream nothing sent, `rate` per second from `start()` to `stop()`, sent by
    `pump()` as they fall due (at most FLOOD_BATCH at a time, so the acker's own events are
    read between)."""

    def __init__(self, node: Node, rate: int, record: Record, seed: int, first_index: int):
        self.node, self.rate, self.record, self.seed = node, rate, record, seed
        self.index = first_index  # flood items are numbered after the hostile ones
        self.started: float | None = None
        self.sent = 0
        self.on = False

    def start(self) -> None:
        if self.rate > 0:
            self.started, self.on = time.monotonic(), True

    def stop(self) -> None:
        self.on = False

    def pump(self) -> bool:
        """Send the flood acks due now; -> False when none was due (the caller may rest)."""
        if not self.on or self.started is None:
            return False
        if time.monotonic() - self.started > FLOOD_MAX_S:
            self.on = False  # a producer that cannot keep up would otherwise be flooded for ever
            return False
        due = min(int(self.rate * (time.monotonic() - self.started)) + 1 - self.sent, FLOOD_BATCH)
        for _ in range(due):
            item = Item(self.index, FLOOD)
            value, metadata = forge.forge_ack(item, FLOOD_CONTEXT, self.seed)
            self.node.send_output("ack", value, metadata)
            self.record.sent(item)
            self.index += 1
            self.sent += 1
        return due > 0


FLOOD_CONTEXT = forge.AckContext(stream="", count=0)  # a flood ack names nothing of the run
FLOOD_MAX_S = 30.0  # the flood stops after this long, whether or not the span's last message came
FLOOD_BATCH = 64  # flood acks sent at most between two looks at the acker's own input
FLOOD_REST_S = 0.0002  # nothing due and nothing queued: how long the flooding acker rests


def run_acker(node: Node, s: Settings, record: Record) -> None:
    """Acknowledge each message of the producer once, its burst of hostile acks first, and flood
    over the middle half of the run (Flood)."""
    acker = Acker(node, s, record)
    flood = Flood(node, s.flood_rate, record, s.seed, s.hostile)
    while True:
        event = node.try_recv() if flood.on else node.next()
        if event is None:
            if not flood.on:
                break  # the stream ended
            if not flood.pump():
                time.sleep(FLOOD_REST_S)
            continue
        k = acker.take(event)
        if k == acker.lo:
            flood.start()
        elif k == acker.hi:
            flood.stop()
        flood.pump()  # after the event's own ack: the flood delays none of this acker's acks
    record.extra.update({**acker.figures(), "flood_sent": flood.sent})


class Acker:
    """The acknowledging side of run_acker: each message of the producer acknowledged once (its
    first copy), that message's burst of hostile acks just before."""

    def __init__(self, node: Node, s: Settings, record: Record):
        self.node, self.s, self.record = node, s, record
        self.per = bursts(plan(s.target, s.seed, s.hostile), s.real, first=s.window + 1)
        self.ctx = forge.AckContext(stream="", count=s.real)
        self.lo, self.hi = flood_span(s.real)
        self.acked: list[tuple[int, int]] = []  # (seq, tx) in the order acknowledged
        self.seen: set[tuple[str, int]] = set()
        self.arrived: dict[int, float] = {}  # k -> when the k-th distinct message came (the flood's span)
        self.copies = self.unexpected = 0
        self.k = 0  # distinct messages taken

    def take(self, event: dict) -> int | None:
        """Acknowledge a data message (its hostile burst first); -> its k (the how-manieth
        distinct message it is, from 0), or None for anything else."""
        s, ctx = self.s, self.ctx
        if event["type"] != "INPUT" or event["id"] != "data":
            return None
        ack = ack_for(event["metadata"])
        key = None if ack is None else (ack[P.STREAM], ack[P.SEQ])
        if key in self.seen:
            self.copies += 1  # a resend: acknowledged once already (an ack of it now would be stray)
            return None
        if ack is None or key is None or self.k >= s.real:
            self.unexpected += 1  # a message that wants no ack, or more than REAL
            return None
        k = self.k
        self.seen.add(key)
        self.arrived[k] = time.monotonic()
        ctx.stream = ack[P.STREAM]
        if self.per[k]:
            # The producer sends message k only with fewer than WINDOW unacknowledged, and both
            # its consumers acknowledge in order: every message up to k - WINDOW - 1 is delivered.
            ctx.delivered = {seq: tx for seq, tx in self.acked if seq <= k - s.window - 1}
        for item in self.per[k]:
            value, metadata = forge.forge_ack(item, ctx, s.seed)
            self.node.send_output("ack", value, metadata)
            self.record.sent(item)
        self.node.send_output("ack", forge.EMPTY, ack)
        self.acked.append((ack[P.SEQ], ack.get(P.TX, 0)))
        self.k += 1
        return k

    def figures(self) -> dict:
        lo, hi, arrived = self.lo, self.hi, self.arrived
        span = None
        if lo in arrived and hi in arrived and arrived[hi] > arrived[lo]:
            seconds = arrived[hi] - arrived[lo]
            span = {"from": lo, "to": hi, "seconds": round(seconds, 4), "per_s": round((hi - lo) / seconds, 1)}
        return {
            "acknowledged": self.k,
            "copies": self.copies,
            "unexpected": self.unexpected,
            "flood_span": span,
            "stream": self.ctx.stream,
        }


class AckWaiter:
    """Waits for the node under test to acknowledge one good message (other acks are ignored)."""

    def __init__(self, node: Node, s: Settings):
        self.node = node
        self.s = s
        self.others = 0

    def wait(self, seq: int) -> None:
        deadline = time.monotonic() + self.s.ack_wait_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no ack of good message {seq} within {self.s.ack_wait_s:g} s")
            event = self.node.next(timeout=min(left, 5.0))
            if event is None:
                raise RuntimeError(f"the event stream ended before the ack of good message {seq}")
            if event["type"] != "INPUT" or is_timeout(event):
                continue
            metadata = event["metadata"] or {}
            if metadata.get(P.STREAM) == forge.GOOD_STREAM and metadata.get(P.SEQ) == seq:
                return
            self.others += 1


def run_producer(node: Node, s: Settings, record: Record, output: str) -> None:
    """Good messages 0 .. REAL-1, each after its burst of hostile ones, one ack at a time."""
    per = bursts(plan(s.target, s.seed, s.hostile), s.real)
    waiter = AckWaiter(node, s)
    for k in range(s.real):
        for item in per[k]:
            if output == "tensors":
                value, metadata = forge.forge_tensor(item, k, s.real, s.seed)
            elif output == "jpeg":
                value, metadata = forge.forge_jpeg(item, k, s.seed)
            else:
                value, metadata = forge.forge_frame(item, k, s.seed)
            node.send_output(output, value, metadata)
            record.sent(item)
        if output == "tensors":
            value, metadata = forge.good_tensor(k, s.real)
        elif output == "jpeg":
            value, metadata = forge.good_jpeg(k, s.real, k + 1)
        else:
            value, metadata = forge.good_frame(k, s.real, k + 1)
        node.send_output(output, value, metadata)
        waiter.wait(k)
    record.extra.update({"good": s.real, "other_acks": waiter.others})


def main() -> int:
    s = Settings.from_env(os.environ)
    record = Record(s)
    node = Node()
    if s.target in ACK_TARGETS:
        run_acker(node, s, record)
    elif s.target in ("receiver", "monitor"):
        run_producer(node, s, record, "tensors")
    elif s.target in ("decoder", "sink"):
        run_producer(node, s, record, "jpeg")
    elif s.target == "encoder":
        run_producer(node, s, record, "frames")
    else:
        print(f"hostile node: TARGET: expected one of {', '.join(TARGETS)}, got {s.target!r}", file=sys.stderr)
        return 2
    record.write()
    print(f"hostile node: sent {dict(record.buckets)}, {record.categories[FLOOD.name]} of them flood", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
