"""What every transport provides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import torch

from ..wire import Plan, ReceivedLeaf

ENCODE_OUTPUT = "<tc.encode>"  # the output tc.encode's messages are accounted and logged under


@dataclass
class Materialized:
    """Decoded leaf tensors, plus what a zero-copy result borrows.

    `borrowed` is None when the tensors own their memory (a copy was made); otherwise it is the
    buffer they view, kept by the lifetime registry so `keep()` can copy a message in one go.
    `locations` are each leaf's byte offset inside `borrowed`.
    """

    tensors: list[torch.Tensor]
    borrowed: torch.Tensor | None
    locations: list[int]


class Transport(Protocol):
    name: str
    leaf_keys: frozenset  # per-leaf header keys this transport adds
    header_keys: frozenset  # top-level header keys this transport adds

    def encode(self, plan: Plan) -> tuple[pa.Array, dict]:
        """Lay the planned message out; -> (Arrow value, the codec's metadata)."""

    def send(self, node: Any, output_id: str, plan: Plan, metadata: dict) -> bool:
        """Lay the planned message out straight into a dora output (one pass) and send it.
        -> False when the output's policy dropped it instead (CUDA IPC past its cap)."""

    def prepare(self, header: dict, leaves: list[ReceivedLeaf]) -> Any:
        """Validate the transport's own header and leaf fields; -> what `materialize` needs.

        Runs once per distinct header (its result is cached with the header).
        """

    def materialize(
        self, value: Any, metadata: dict, prepared: Any, leaves: list[ReceivedLeaf], *, copy: bool, device: torch.device | None = None
    ) -> Materialized:
        """Check `value` against the prepared header and build the leaf tensors.

        `device`: where the tensors must live (None: wherever this transport puts them). Tensors
        placed on another device than the message's own own their memory.
        """
