"""The hostile dora node (`python -u -m tools.fuzz_nodes.node`, the repository on PYTHONPATH):
real traffic through the node under test, hostile inputs between it, and a JSON record of what
it sent, per category and per bucket (schedule.py), for the runner to hold the node's counts to.

Two ways of taking part, by TARGET:

- sender, camera, encoder-ack, decoder-ack (`acker`): subscribed to the producer's output as one
  of its consumers, it acknowledges every message once (its first copy) on its `ack` output, and
  before each ack sends that message's burst of hostile acks and flood acks. The producer is done only once the last
  message is acknowledged, and dora hands an input's messages over in order, so the producer has
  read every hostile ack before it ends.
- receiver and monitor (`tensors`), decoder and sink (`jpeg`), encoder (`frames`): it is the producer: good
  messages (numbered, wanting an ack) with hostile ones between them, one good message at a time
  (the next goes once the node acknowledged the last: the node's queue never holds more than one
  burst, so dora drops nothing).

Settings (env): TARGET, SEED, HOSTILE (hostile items), FLOOD (flood acks), REAL (real messages:
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
    flood: int
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
            flood=int(env.get("FLOOD", "0")),
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
            "flood": s.flood,
            "real": s.real,
            "sent": dict(self.categories),
            "buckets": buckets,
            "miscount": s.miscount or None,
            "wall_s": round(time.monotonic() - self.started, 3),
            **self.extra,
        }
        s.result.parent.mkdir(parents=True, exist_ok=True)
        s.result.write_text(json.dumps(record, indent=1))


def run_acker(node: Node, s: Settings, record: Record) -> None:
    """Acknowledge each message of the producer once, its burst of hostile acks first."""
    per = bursts(plan(s.target, s.seed, s.hostile, s.flood), s.real, first=s.window + 1)
    ctx = forge.AckContext(stream="", count=s.real)
    acked: list[tuple[int, int]] = []  # (seq, tx) in the order acknowledged
    seen: set[tuple[str, int]] = set()
    arrived: dict[int, float] = {}  # k -> when the k-th distinct message came (the flood's span)
    copies = unexpected = 0
    k = 0
    for event in node:
        if event["type"] != "INPUT" or event["id"] != "data":
            continue
        ack = ack_for(event["metadata"])
        key = None if ack is None else (ack[P.STREAM], ack[P.SEQ])
        if key in seen:
            copies += 1  # a resend: acknowledged once already (an ack of it now would be stray)
            continue
        if ack is None or k >= s.real:
            unexpected += 1  # a message that wants no ack, or more than REAL
            continue
        seen.add(key)
        arrived[k] = time.monotonic()
        ctx.stream = ack[P.STREAM]
        # The producer sends message k only with fewer than WINDOW unacknowledged, and both its
        # consumers acknowledge in order: every message up to k - WINDOW - 1 is fully delivered.
        ctx.delivered = {seq: tx for seq, tx in acked if seq <= k - s.window - 1}
        for item in per[k]:
            value, metadata = forge.forge_ack(item, ctx, s.seed)
            node.send_output("ack", value, metadata)
            record.sent(item)
        node.send_output("ack", forge.EMPTY, ack)
        acked.append((ack[P.SEQ], ack.get(P.TX, 0)))
        k += 1
    lo, hi = flood_span(s.real)
    span = None
    if lo in arrived and hi in arrived and arrived[hi] > arrived[lo]:
        seconds = arrived[hi] - arrived[lo]
        span = {"from": lo, "to": hi, "seconds": round(seconds, 4), "per_s": round((hi - lo) / seconds, 1)}
    record.extra.update(
        {"acknowledged": k, "copies": copies, "unexpected": unexpected, "flood_span": span, "stream": ctx.stream}
    )


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
