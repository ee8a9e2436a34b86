"""The send path, one way, written once for `tc.encode` (an Arrow buffer of its own) and `tc.send`
(dora's send buffer, or a value dora copies: tensor_codec/dora/output.py):

1. `lay_out`: the object taken apart (plan.py), its transport picked (routing.py), the message
   laid out by that transport (its metadata, its length, where each leaf goes);
2. `write`: the leaves' bytes written into a destination the caller holds;
3. the transport's `abandon` when anything fails before the message has left (``with outgoing:``;
   what the layout holds, a CUDA IPC slot, is freed then).

What differs between encode and send (the destination, dora's checks and primitives) stays with
each of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from . import gpus, routing
from .layout import Destination
from .plan import Plan, make_plan
from .transports import Outgoing, Output, get_transport
from .transports.names import HOST, HOST_TO_GPU

__all__ = ["lay_out", "resolve", "write"]


def lay_out(
    obj: Any,
    requested: str,
    output: Output,
    route: Callable[[], routing.OutputRoute] | None = None,
) -> Outgoing | None:
    """Plan `obj`, pick its transport (`requested`, with routing's rule; `route`: the output's
    consumers, asked for ``auto`` only, so None where there is no dataflow) and lay the message
    out (the Outgoing names the transport that laid it out). None: the output's in-flight policy
    dropped it (CUDA IPC past its cap)."""
    plan = make_plan(obj)
    # "host" is host bytes, always (`resolve`'s first line), without a call: this runs per message.
    name = HOST if requested == HOST else resolve(plan, requested, output, route)[0]
    if name == HOST_TO_GPU:
        # Host bytes on the wire, the GPU in the header: receivers restore onto it.
        name, output = HOST, dataclasses.replace(output, onto_gpu=gpus.gpu_of(plan))
    return get_transport(name).lay_out(plan, output)


_ASKED_FOR_HOST = (HOST, "asked for by the code")


def resolve(
    plan: Plan, requested: str, output: Output, route: Callable[[], routing.OutputRoute] | None = None
) -> tuple[str, str]:
    """-> (transport, why) of a message of `plan` on `output` (routing.resolve; HOST_TO_GPU
    included): what `lay_out` uses, and what `tc.transport_for` reports."""
    if requested == HOST:
        return _ASKED_FOR_HOST  # what routing.resolve gives "host", always: no call per message
    return routing.resolve(
        requested, plan.has_cuda, route, announced=output.announced, output=output.name, size=lambda: plan.data_bytes
    )


def write(outgoing: Outgoing, dest: Destination) -> None:
    """Write the message's leaves into `dest` (its value's bytes, `outgoing.nbytes` long)."""
    outgoing.transport.write(outgoing, dest)
