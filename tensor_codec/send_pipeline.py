"""The send path, one way, written once for `tc.encode` (an Arrow buffer of its own) and `tc.send`
(dora's send buffer, or a value dora copies):

1. `lay_out`: the object taken apart (plan.py), its transport picked (routing.py), the message
   laid out by that transport (its metadata, its length, where each leaf goes);
2. `write`: the leaves' bytes written into a destination the caller holds;
3. the transport's `abandon` when anything fails before the message has left (``with laid:``;
   what the layout holds, a CUDA IPC slot, is freed then).

What differs between encode and send (the destination, dora's checks and primitives) stays with
each of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from . import routing
from .layout import Destination
from .plan import Plan, make_plan
from .transports import Outgoing, Output, Transport, get_transport
from .transports.names import CUDA_IPC, HOST, HOST_TO_GPU

if TYPE_CHECKING:  # transports load on first use (tests/codec/test_hygiene.py)
    from .cuda_ipc.transport import CudaIpcTransport

__all__ = ["Laid", "lay_out", "write"]


@dataclass(slots=True)
class Laid:
    """A message laid out by its transport, its bytes not yet written. Used as a context around
    writing and sending it: the layout is given up if that raises (the message never left). A
    class rather than a generator context: this runs on every message."""

    transport: Transport
    outgoing: Outgoing

    @property
    def plan(self) -> Plan:
        return self.outgoing.plan

    def __enter__(self) -> Laid:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        if kind is not None:
            self.transport.abandon(self.outgoing)


def lay_out(
    obj: Any,
    requested: str,
    output: Output,
    route: Callable[[], routing.OutputRoute] | None = None,
    key: Any = None,
) -> Laid | None:
    """Plan `obj`, pick its transport (`requested`, with routing's rule; `route`: the output's
    consumers, asked for ``auto`` only, so None where there is no dataflow) and lay the message
    out. None: the output's in-flight policy dropped it (CUDA IPC past its cap)."""
    plan = make_plan(obj)
    if requested == HOST:
        name = HOST  # host bytes are what "host" resolves to, always (routing.resolve): no call
    else:
        name, _ = routing.resolve(
            requested, plan.has_cuda, route, key=key, output=output.name, size=lambda: plan.data_bytes
        )
    if name == HOST_TO_GPU:
        # Host bytes on the wire, the GPU in the header: receivers restore onto it.
        ipc = cast("CudaIpcTransport", get_transport(CUDA_IPC))  # it maps GPUs to UUIDs (and the stand-in's)
        name, output.onto_gpu = HOST, ipc.gpu_of(plan)
    chosen = get_transport(name)
    outgoing = chosen.lay_out(plan, output)
    return None if outgoing is None else Laid(chosen, outgoing)


def write(laid: Laid, dest: Destination) -> None:
    """Write the message's leaves into `dest` (its value's bytes, `laid.outgoing.nbytes` long)."""
    laid.transport.write(laid.outgoing, dest)
