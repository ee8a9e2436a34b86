"""`tc.receive`: the object of a dora INPUT event, which is `codec.decode` of its value and
metadata with the event's input id naming errors. What is dora's here is the event alone."""

from __future__ import annotations

from typing import Any

from ..codec import decode
from ..errors import DecodeError

__all__ = ["receive"]


def receive(event: Any, *, copy: bool = False, device: Any = None) -> Any:
    """Decode the object of a dora INPUT event (see `tensor_codec.decode`, also for `copy` and
    `device`); the input id names errors."""
    if not isinstance(event, dict) or event.get("type") != "INPUT":
        kind = event.get("type") if isinstance(event, dict) else type(event).__name__
        raise DecodeError(f"event.type: expected 'INPUT', got {kind!r:.80}")
    if "value" not in event or "metadata" not in event:
        missing = "value" if "value" not in event else "metadata"
        raise DecodeError(f"event: expected key {missing!r}, missing")
    return decode(event["value"], event["metadata"], copy=copy, device=device, name=event.get("id"))
