"""The send path, written once for `tc.encode` (an Arrow buffer of its own) and `tc.send` (dora's
send buffer, or a value dora copies: tensor_codec/dora/output.py): `lay_out` (plan, transport,
layout), then the transport's `write` into the caller's destination, within the `Outgoing`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from . import gpus, routing
from .plan import make_plan
from .transports import Outgoing, Output, get_transport
from .transports.names import HOST, HOST_TO_GPU

__all__ = ["lay_out"]


def lay_out(
    obj: Any,
    requested: str,
    output: Output,
    route: Callable[[], routing.OutputRoute] | None = None,
) -> Outgoing | None:
    """Plan `obj`, pick its transport (`requested`, with routing's rule; `route`: the output's
    consumers, asked for ``auto`` only, so None where there is no dataflow) and lay the message
    out; None where the output's in-flight policy dropped it (CUDA IPC past its cap)."""
    plan = make_plan(obj)
    # "host" is host bytes, always (what routing.resolve gives it), without a call: this runs per message.
    name = HOST if requested == HOST else routing.resolve(requested, plan, output, route)[0]
    if name == HOST_TO_GPU:
        # Host bytes on the wire, the GPU in the header: receivers restore onto it.
        name, output = HOST, dataclasses.replace(output, onto_gpu=gpus.gpu_of(plan))
    return get_transport(name).lay_out(plan, output)
