"""The send path, written once for `tc.encode` (an Arrow buffer of its own) and `tc.send` (dora's
send buffer, or a value dora copies: tensor_codec/dora/output.py): `lay_out` (plan, transport,
layout), then the transport's `write` into the caller's destination, within the `Outgoing`."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import torch

from . import gpus, limits, routing
from .plan import make_plan
from .transports import Outgoing, Output, get_transport
from .transports.names import AUTO, HOST, HOST_TO_GPU

__all__ = ["lay_out"]

log = logging.getLogger("tensor_codec")


def lay_out(
    obj: Any,
    requested: str,
    output: Output,
    route: Callable[[], routing.OutputRoute] | None = None,
) -> Outgoing | None:
    """Plan `obj`, pick its transport (`requested`, with routing's rule; `route`: the output's
    consumers, asked for ``auto`` only, so None where there is no dataflow) and lay the message
    out; None where the output's in-flight policy dropped it (CUDA IPC past its cap)."""
    checked_under = None
    if requested != HOST:
        limits.current()  # (installed: its generation is the one the layout is checked under)
        checked_under = (limits.generation, routing.env_key() if requested == AUTO else None)
        keeper = output.prepared_by
        if keeper is not None and isinstance(obj, torch.Tensor):  # a prepared stream's, maybe
            prepared = keeper.lay_out_prepared(obj, requested, checked_under, output)
            if prepared is not None:
                return None if prepared is False else prepared
    plan = make_plan(obj)
    # "host" is host bytes, always (what routing.resolve gives it), without a call: this runs per message.
    name = HOST if requested == HOST else routing.resolve(requested, plan, output, route)[0]
    if name == HOST_TO_GPU:
        # Host bytes on the wire, the GPU in the header: receivers restore onto it.
        name, output = HOST, dataclasses.replace(output, onto_gpu=gpus.gpu_of(plan))
    transport = get_transport(name)
    outgoing = transport.lay_out(plan, output)
    if outgoing is not None and checked_under is not None and name != HOST:
        try:
            transport.remember(obj, requested, checked_under, outgoing, output)
        except Exception as e:  # the message is laid out: it goes unprepared rather than not at all
            log.warning("output '%s': a send could not be prepared: %s: %s", output.name, type(e).__name__, e)
    return outgoing
