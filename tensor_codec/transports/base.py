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
    """Where a message goes: one per output port, kept (a dora Output's `sink`); a message
    restored onto a GPU goes with a copy naming it."""

    name: str  # in-flight accounting, logs
    receivers: Callable[[], int]  # how many read a message (asked only by transports that track them)
    onto_gpu: str | None = None  # the GPU (UUID) receivers restore host bytes onto (routing.HOST_TO_GPU)
    receivers_per_process: Callable[[], int] = lambda: 1  # how many of those one process may be
    announced: set = field(default_factory=set)  # (transport, why) pairs routing.resolve logged for it
    # Prepared sends a transport keeps here (signature -> its own record: CUDA IPC's), and that
    # transport (`Transport.remember`); host bytes' are the dora Output's (tensor_codec/dora/output.py).
    prepared: dict = field(default_factory=dict)
    prepared_by: Any = None


@dataclass(slots=True)
class Outgoing:
    """A planned message laid out by a transport, its value's bytes not yet written. A context
    around writing and sending it: the transport's `abandon` gives the layout up if that raises
    (the message never left). Not a generator context: this runs per message."""

    plan: Plan
    metadata: dict  # the codec's keys, maybe the plan's cache's: copy it before handing it out
    nbytes: int  # the Arrow value's length
    offsets: list[int]  # where each leaf goes in it
    transport: Transport  # the one that laid it out
    token: Any = None  # the transport's own (a CUDA IPC ledger slot, freed by `abandon`)
    in_value: bool = True  # the bytes travel in the value (host); else it is empty (CUDA IPC: on the GPU)

    def __enter__(self) -> Outgoing:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        if kind is not None:
            self.transport.abandon(self)


@dataclass
class Materialized:
    """Decoded leaf tensors, plus what a zero-copy result borrows: `borrowed`, None when the
    tensors own their memory, else the buffer they view, kept by the lifetime registry so `keep()`
    can copy a message in one go: a tensor, or an object `torch.from_dlpack` views (the host value
    of a one-leaf message typed as its leaf, whose DLPack tensor is the leaf itself)."""

    tensors: list[torch.Tensor]
    borrowed: Any
    locations: list[int]  # each leaf's byte offset inside `borrowed`


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

    def remember(self, obj: Any, requested: str, checked_under: Any, outgoing: Outgoing, output: Output) -> None:
        """After `lay_out` of `obj` (sent as `requested`; `checked_under`: the codec's limits
        generation and what routing read of the environment, taken before the layout): keep on
        `output` what its signature's next messages can skip, as `output.prepared` and
        `output.prepared_by`, for `lay_out_prepared`; or nothing."""

    def lay_out_prepared(self, obj: Any, requested: str, checked_under: Any, output: Output) -> Outgoing | bool | None:
        """A message of a signature `remember`ed under `checked_under` as it stands now, laid out
        in fewer steps; False: dropped by the output's policy; None: not one (the full path
        takes it)."""

    def prepare(self, header: dict, leaves: list[ReceivedLeaf]) -> Any:
        """Validate the transport's own header and leaf fields, once per distinct header (cached
        with it); -> what `materialize` needs."""

    def in_place_layout(self, prepared: Any) -> tuple[int, torch.dtype, tuple, tuple] | None:
        """For a header of one leaf, once (cached with it): (the value's length in bytes, the leaf's
        dtype, shape and strides) when `received.Compiled.view` may view a message's value as the
        leaf, checking only its Arrow type, length, nulls and alignment, never calling the transport:
        the leaf starts at the value's first byte, is not empty, its bytes need no check (not bool),
        torch views its dtype without warning (not complex32), nothing is restored onto a device and
        no metadata key of the transport's is read. Else None."""

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
        """Check `value` against the prepared header and build the leaf tensors; `device`: where
        they must live (None: wherever this transport puts them; on another device than the
        message's own, they own their memory)."""
