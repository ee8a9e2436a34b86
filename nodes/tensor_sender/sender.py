"""The sender's per-message logic, without dora: which payload a seq is, and its metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..common import protocol as P
from .payloads import Payload


@dataclass
class Outgoing:
    """A message ready to send: a codec object, or (corrupted messages) a raw Arrow value."""

    metadata: dict
    obj: Any = None
    raw: pa.Array | None = None


class TensorSender:
    """Message `seq` -> what to send. Payloads cycle; corrupted messages (if any) are spread
    through a finite run so a receiver must keep going after each. `total` is 0 when endless."""

    def __init__(
        self,
        payloads: list[Payload],
        count: int | None,
        corrupted=(),
        stream: str | None = None,
        wants_ack: bool = False,
    ):
        if not payloads:
            raise ValueError("payloads: expected at least one, got none")
        self.payloads = payloads
        self.stream = stream or P.new_stream_id()
        self.wants_ack = wants_ack
        self.failures_in_a_row = 0  # sends that raised in a row, counted by node.transmit
        n_payload = len(payloads) if count is None else count
        self.total = n_payload + len(corrupted) if n_payload else 0
        # Corrupted message j goes after payload message floor((j+1) * n / (k+1)): spread evenly,
        # in order, and always inside the run however small COUNT is.
        self.corrupt_at: dict[int, tuple[str, pa.Array, dict]] = {}
        k = len(corrupted)
        for j, message in enumerate(corrupted if n_payload else ()):
            self.corrupt_at[(j + 1) * n_payload // (k + 1) + j] = message

    def _payload_index(self, seq: int) -> int:
        before = sum(1 for s in self.corrupt_at if s < seq)
        return (seq - before) % len(self.payloads)

    def message(self, seq: int) -> Outgoing:
        metadata = {P.SEQ: seq, P.COUNT: self.total, P.STREAM: self.stream}
        if self.wants_ack:
            metadata[P.WANTS_ACK] = True
        corrupt = self.corrupt_at.get(seq)
        if corrupt is not None:
            case, value, codec_metadata = corrupt
            return Outgoing({**codec_metadata, **metadata, P.CASE: case, P.EXPECT: P.REJECT}, raw=value)
        payload = self.payloads[self._payload_index(seq)]
        obj, checksum = payload.build(seq)
        return Outgoing({**metadata, P.CASE: payload.case, P.CHECKSUM: checksum}, obj=obj)
