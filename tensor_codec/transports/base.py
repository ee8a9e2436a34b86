"""What every transport provides: it lays a planned message out and writes its bytes into a
destination it is given (an Arrow buffer for `tc.encode`, dora's send buffer for `tc.send`: the
two differ only in where the bytes go), and it materializes a received message. Transports
never call dora (tensor_codec/dora/ does)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..layout import Destination
from ..plan import Plan
from ..wire.header import ReceivedLeaf

__all__ = ["ENCODE_OUTPUT", "Output", "Outgoing", "Materialized", "Transport"]

ENCODE_OUTPUT = "<tc.encode>"  # the output tc.encode's messages are accounted and logged under


@dataclass(slots=True)
class Output:
    """Where a message goes: the output's name (in-flight accounting, logs), how many receivers
    will read it and how many of those one receiving process may be (its inputs wired to the
    output; both asked only by transports that track receivers), and `onto_gpu`: the UUID of
    the GPU host bytes are to be restored onto at the receivers (routing's small-message rule,
    routing.HOST_TO_GPU), None for tensors restored where the receiver asks. One per output port,
    kept (a dora Output's `sink`): `announced` holds the choices of transport it logged
    (routing.resolve); a message restored onto a GPU goes with a copy naming it."""

    name: str
    receivers: Callable[[], int]
    onto_gpu: str | None = None
    receivers_per_process: Callable[[], int] = lambda: 1
    announced: set = field(default_factory=set)


@dataclass(slots=True)
class Outgoing:
    """A planned message laid out by a transport, its value's bytes not yet written.

    `metadata` holds the codec's keys (it may be shared with the plan's cache: copy it before
    handing it out); `nbytes` is the Arrow value's length; `offsets` where each leaf goes in it;
    `token` is the transport's own (a CUDA IPC ledger slot, freed by `abandon`). `in_value`:
    whether the bytes travel in the value (host); if not, the value is empty and nothing is
    written (CUDA IPC: the bytes stay on the GPU). `transport`: the one that laid it out.

    A context around writing and sending it: the transport's `abandon` gives the layout up if
    that raises (the message never left). Not a generator context: this runs per message."""

    plan: Plan
    metadata: dict
    nbytes: int
    offsets: list[int]
    transport: Transport
    token: Any = None
    in_value: bool = True

    def __enter__(self) -> Outgoing:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        if kind is not None:
            self.transport.abandon(self)


@dataclass
class Materialized:
    """Decoded leaf tensors, plus what a zero-copy result borrows.

    `borrowed` is None when the tensors own their memory (a copy was made); otherwise it is the
    buffer they view, kept by the lifetime registry so `keep()` can copy a message in one go: a
    tensor, or an object `torch.from_dlpack` views (the host value of a one-leaf message typed as
    its leaf, whose DLPack tensor is the leaf itself). `locations` are each leaf's byte offset
    inside `borrowed`.
    """

    tensors: list[torch.Tensor]
    borrowed: Any
    locations: list[int]


class Transport(Protocol):
    name: str
    leaf_keys: frozenset  # per-leaf header keys this transport adds
    header_keys: frozenset  # top-level header keys this transport adds

    def lay_out(self, plan: Plan, output: Output) -> Outgoing | None:
        """Where every byte goes, and the codec's metadata; None when the output's policy dropped
        the message instead (CUDA IPC past its cap)."""

    def write(self, outgoing: Outgoing, dest: Destination) -> None:
        """Write the value's `outgoing.nbytes` bytes into `dest` (one pass per leaf)."""

    def abandon(self, outgoing: Outgoing) -> None:
        """The message will not be sent after all: free what `lay_out` holds for it."""

    def prepare(self, header: dict, leaves: list[ReceivedLeaf]) -> Any:
        """Validate the transport's own header and leaf fields; -> what `materialize` needs.

        Runs once per distinct header (its result is cached with the header).
        """

    def in_place_layout(self, prepared: Any) -> tuple[int, torch.dtype, tuple, tuple] | None:
        """For a header of one leaf: (the value's length in bytes, the leaf's dtype, shape and
        strides) when a message's value is an Arrow array of exactly those bytes, which a DLPack
        view retypes and shapes in place (received.Compiled.view does, for messages of seen headers whose
        object is one tensor); None when this transport has no such view for this header. Asked
        once per distinct header (cached with it).

        A layout is a promise that Compiled.view may hand those bytes out as they are, checking only
        the value's Arrow type, length, nulls and alignment, and never calling the transport for
        that message: the leaf starts at the value's first byte, is not empty, needs no check of
        its bytes (not bool, whose bytes must be 0 or 1) and is a dtype torch views without
        warning (not complex32), nothing is to be restored onto a device, and no metadata key of
        the transport's is to be read. Anything else: None."""

    def materialize(
        self,
        value: Any,
        metadata: dict,
        prepared: Any,
        leaves: list[ReceivedLeaf],
        *,
        copy: bool,
        device: torch.device | None = None,
    ) -> Materialized:
        """Check `value` against the prepared header and build the leaf tensors.

        `device`: where the tensors must live (None: wherever this transport puts them). Tensors
        placed on another device than the message's own own their memory.
        """
