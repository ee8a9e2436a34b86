"""send / receive on a dora node."""

from __future__ import annotations

from typing import Any

from . import routing
from .codec import decode
from .errors import DecodeError, EncodeError
from .transports import TRANSPORT_NAMES, get_transport
from .wire import RESERVED_PREFIX, make_plan

__all__ = ["send", "receive", "transport_for", "DORA_IMAGE_KEYS"]

# dora's image convention (flat uint8 bytes described by these keys): a dora-hub node takes any
# message carrying them as such an image, so tc.send refuses them (tc.send_plain is for that).
DORA_IMAGE_KEYS = ("encoding", "width", "height")


def send(node: Any, output_id: str, obj: Any, metadata: dict | None = None, *, transport: str = "auto") -> bool:
    """Encode `obj` and send it on `output_id` of a dora node, writing tensors straight into
    dora's send buffer (one pass per tensor). `metadata` holds the caller's own keys; keys starting
    with ``tc.`` are reserved. Raises `MessageTooLargeError` (naming ``shared_memory_pool_size``)
    before writing anything if no dora route can carry the message.

    ``transport="auto"`` (default): CUDA IPC when the message holds CUDA tensors and every
    consumer of the output runs on this machine, host bytes otherwise (tensor_codec/routing.py
    has the rule; ``TC_TRANSPORT`` in the node's environment forces one). ``"host"``: bytes in
    the dora message. ``"cuda-ipc"``: CUDA tensors go to receivers on this machine without
    touching the host (see `tensor_codec.ipc_configure` for the cap on bytes in flight).
    Returns False when that cap's ``on_full="drop"`` policy dropped the message, else True.
    """
    if metadata is not None and not isinstance(metadata, dict):
        raise EncodeError(f"metadata: expected a dict (or None), got {type(metadata).__name__}")
    if metadata:
        reserved = [k for k in metadata if isinstance(k, str) and k.startswith(RESERVED_PREFIX)]
        if reserved:
            raise EncodeError(f"metadata: keys starting with {RESERVED_PREFIX!r:.80} are reserved for the codec, got {reserved}")
        image_keys = [k for k in DORA_IMAGE_KEYS if k in metadata]
        if image_keys:
            raise EncodeError(
                f"metadata.{image_keys[0]}: dora's image key, which says the value is flat image bytes; a tensor_codec "
                "message is not, and dora-hub image nodes would read its bytes as pixels, scrambled. Send flat bytes "
                "with tc.send_plain, or name the pixel format under another key (the nodes use `pixel_format`)"
            )
    if transport not in TRANSPORT_CHOICES:
        raise EncodeError(f"unsupported transport: expected one of {list(TRANSPORT_CHOICES)}, got {transport!r:.80}")
    plan = make_plan(obj)
    name, _ = routing.resolve(transport, plan.has_cuda, lambda: routing.route_of(node, output_id), key=id(node), output=output_id)
    return get_transport(name).send(node, output_id, plan, dict(metadata) if metadata else {})


TRANSPORT_CHOICES = ("auto", *TRANSPORT_NAMES)


def transport_for(node: Any, output_id: str, obj: Any) -> tuple[str, str]:
    """-> (transport, why): what ``send(node, output_id, obj)`` would use, and the reason (the
    consumers' placement, the data's device, ``TC_TRANSPORT``). Nothing is sent."""
    has_cuda = make_plan(obj).has_cuda
    return routing.resolve("auto", has_cuda, lambda: routing.route_of(node, output_id), key=id(node), output=output_id)


def receive(event: Any, *, copy: bool = False, device: Any = None) -> Any:
    """Decode the object of a dora INPUT event (see `decode`, also for `device`); the input id
    names errors."""
    if not isinstance(event, dict) or event.get("type") != "INPUT":
        kind = event.get("type") if isinstance(event, dict) else type(event).__name__
        raise DecodeError(f"event.type: expected 'INPUT', got {kind!r:.80}")
    for key in ("value", "metadata"):
        if key not in event:
            raise DecodeError(f"event: expected key {key!r}, missing")
    return decode(event["value"], event["metadata"], copy=copy, device=device, name=event.get("id"))
