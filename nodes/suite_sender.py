"""dora node: send tensor_codec's sample suite, then a few deliberately corrupted messages.

Every case of `tensor_codec.testing.make_suite` (failure-mode layouts, every dtype, every TVTensor
class and attribute, PackedSequences, nested samples) goes out as one message through `tc.send`,
plus a tensor bigger than dora's default 8 MB pool, plus a tensor modified in place right after
sending (the receiver must see the values from before). Each message carries `case` and `seq` in
its metadata so `suite_receiver.py` can rebuild the expected object and check order.

Settings (env): ROUNDS (default 1), SEED (0), BIG_MB (24; 0 = none), CORRUPT (1 = also send
corrupted messages the receiver must reject and count).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pyarrow as pa
import torch

import tensor_codec as tc
from tensor_codec.testing import make_suite

OUTPUT = "tensors"
MUTATED_CASE = "mutated_after_send"


@dataclass(frozen=True)
class Config:
    rounds: int = 1
    seed: int = 0
    big_mb: int = 24
    corrupt: bool = True


def load_config(env: dict[str, str]) -> Config:
    def integer(name: str, default: int, low: int = 0) -> int:
        raw = env.get(name, str(default))
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{name}: expected an integer >= {low}, got {raw!r}") from None
        if value < low:
            raise ValueError(f"{name}: expected an integer >= {low}, got {value}")
        return value

    corrupt = env.get("CORRUPT", "1")
    if corrupt not in ("0", "1"):
        raise ValueError(f"CORRUPT: expected 0 or 1, got {corrupt!r}")
    return Config(integer("ROUNDS", 1, 1), integer("SEED", 0), integer("BIG_MB", 24), corrupt == "1")


def big_tensor(megabytes: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (megabytes, 1024, 1024), dtype=torch.uint8, generator=g)


def cases(config: Config) -> Iterator[tuple[str, Callable[[], Any]]]:
    """(case name, factory) in sending order; the receiver rebuilds each object from its name.

    Factories, not objects, so a retransmission sends the original values again.
    """
    suite = make_suite(config.seed)
    for _ in range(config.rounds):
        for name, obj in suite.items():
            yield name, (lambda obj=obj: obj)
    if config.big_mb:
        big = big_tensor(config.big_mb, config.seed)
        yield f"big/{config.big_mb}MB", lambda: big
    yield MUTATED_CASE, lambda: torch.arange(12.0).reshape(3, 4)


def corrupted_messages(seed: int) -> Iterator[tuple[str, pa.Array, dict]]:
    """Messages that must be rejected: (case, value, metadata)."""
    value, metadata = tc.encode(make_suite(seed)["layout/stacked"])
    yield "corrupt/truncated", value.slice(0, len(value) - 1), metadata
    yield "corrupt/bad_dtype", value, {**metadata, "tc.header": metadata["tc.header"].replace('"float32"', '"float128"')}
    yield "corrupt/broken_json", value, {**metadata, "tc.header": metadata["tc.header"][:-3]}
    yield "corrupt/not_a_codec_message", pa.array([1, 2, 3], type=pa.uint8()), {}
    flags, flag_metadata = tc.encode(torch.tensor([True, False]))
    raw = bytearray(flags.buffers()[1].to_pybytes()[: len(flags)])
    raw[0] = 7  # bytes of a bool tensor must be 0 or 1
    yield "corrupt/bool_byte", pa.array(list(raw), type=pa.uint8()), flag_metadata


class SuiteSender:
    """Delivery bookkeeping, no dora: a window of messages in flight, acks, retransmissions.

    dora 1.1 can drop messages on its direct data plane (publisher congestion control and the
    consumer's ingress queue; dora-rs/dora#3397). So the receiver acks every message by `seq`,
    at most `window` are unacked at once, and a message unacked after `retry_s` is sent again
    (the receiver counts the duplicate). The final `done` message is acked the same way.
    """

    DONE_SEQ = -1

    def __init__(self, config: Config, window: int = 8, retry_s: float = 1.0):
        self.window = window
        self.retry_s = retry_s
        messages: list[tuple[str, Any]] = [("codec", case, make) for case, make in cases(config)]
        if config.corrupt:
            messages += [("raw", case, (value, metadata)) for case, value, metadata in corrupted_messages(config.seed)]
        self.messages = messages
        self.total = len(messages)
        self.next_seq = 0
        self.unacked: dict[int, float] = {}  # seq -> last send time
        self.done_acked = False
        self.retransmits = 0

    def ack(self, seq: int) -> None:
        if seq == self.DONE_SEQ:
            self.done_acked = True
        self.unacked.pop(seq, None)

    @property
    def all_sent_and_acked(self) -> bool:
        return self.next_seq >= self.total and not self.unacked

    def due(self, now: float) -> list[int]:
        """Sequence numbers to send now: retransmissions first, then new ones up to the window."""
        out = [seq for seq, sent in self.unacked.items() if now - sent >= self.retry_s]
        self.retransmits += len(out)
        for seq in out:
            self.unacked[seq] = now
        while self.next_seq < self.total and len(self.unacked) < self.window:
            self.unacked[self.next_seq] = now
            out.append(self.next_seq)
            self.next_seq += 1
        return out


def send_one(node, sender: SuiteSender, seq: int) -> None:
    kind, case, payload = sender.messages[seq]
    if kind == "codec":
        obj = payload()
        tc.send(node, OUTPUT, obj, {"case": case, "seq": seq})
        if case == MUTATED_CASE:
            obj.add_(100)  # must not change what the receiver got
    else:
        value, metadata = payload
        node.send_output(OUTPUT, value, {**metadata, "case": case, "seq": seq, "expect": "reject"})


def main() -> None:
    from dora import Node

    sender = SuiteSender(load_config(dict(os.environ)))
    node = Node()
    for event in node:
        if event["type"] != "INPUT":
            continue
        if event["id"] == "ack":
            sender.ack(int(event["metadata"]["seq"]))
        if sender.done_acked:
            break
        now = time.monotonic()
        if not sender.all_sent_and_acked:
            for seq in sender.due(now):
                send_one(node, sender, seq)
        elif event["id"] == "tick":  # everything delivered: announce the count until it is acked
            node.send_output("done", pa.array([sender.total], type=pa.int64()), {"count": sender.total, "seq": SuiteSender.DONE_SEQ})
    print(f"suite sender: {sender.total} messages delivered, {sender.retransmits} retransmitted", flush=True)


if __name__ == "__main__":
    main()
