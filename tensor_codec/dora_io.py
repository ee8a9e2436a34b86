"""send / receive on a dora node."""

from __future__ import annotations

from typing import Any

from .codec import decode
from .errors import DecodeError, EncodeError
from .transports import get_transport
from .wire import RESERVED_PREFIX, make_plan

__all__ = ["send", "receive"]


def send(node: Any, output_id: str, obj: Any, metadata: dict | None = None, *, transport: str = "host") -> bool:
    """Encode `obj` and send it on `output_id` of a dora node, writing tensors straight into
    dora's send buffer (one pass per tensor). `metadata` holds the caller's own keys; keys starting
    with ``tc.`` are reserved. Raises `MessageTooLargeError` (naming ``shared_memory_pool_size``)
    before writing anything if no dora route can carry the message.

    ``transport="cuda-ipc"``: CUDA tensors go to receivers on this machine without touching the
    host (see `tensor_codec.ipc_configure` for the cap on bytes in flight). Returns False when
    that cap's ``on_full="drop"`` policy dropped the message, else True.
    """
    if metadata:
        reserved = [k for k in metadata if isinstance(k, str) and k.startswith(RESERVED_PREFIX)]
        if reserved:
            raise EncodeError(f"metadata: keys starting with {RESERVED_PREFIX!r} are reserved for the codec, got {reserved}")
    chosen = get_transport(transport)
    return chosen.send(node, output_id, make_plan(obj), dict(metadata) if metadata else {})


def receive(event: Any, *, copy: bool = False, device: Any = None) -> Any:
    """Decode the object of a dora INPUT event (see `decode`, also for `device`); the input id
    names errors."""
    if not isinstance(event, dict) or event.get("type") != "INPUT":
        kind = event.get("type") if isinstance(event, dict) else type(event).__name__
        raise DecodeError(f"event.type: expected 'INPUT', got {kind!r}")
    for key in ("value", "metadata"):
        if key not in event:
            raise DecodeError(f"event: expected key {key!r}, missing")
    return decode(event["value"], event["metadata"], copy=copy, device=device, name=event.get("id"))
