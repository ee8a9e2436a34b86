"""Everything the codec knows about dora: a node's `Link` (what dora says about it, read once)
and an `Output` per port (the one path a message takes into dora). The functions below are the
public API over them, for any dora node: ``tc.send(node, "out", obj)`` is
``Link.of(node).output("out").send(obj)``."""

from __future__ import annotations

from typing import Any

from .link import Link
from .output import Output
from .receive import receive

__all__ = ["Link", "Output", "send", "receive", "send_plain", "max_send_bytes", "transport_for"]


def send(node: Any, output_id: str, obj: Any, metadata: dict | None = None, *, transport: str = "auto") -> bool:
    """Encode `obj` and send it on `output_id` of a dora node with one copy of each tensor's bytes.
    `metadata` holds the caller's own keys (``tc.`` is reserved). Raises `MessageTooLargeError`,
    naming dora's limit and what lifts it, before writing anything if no dora route can carry the
    message (`max_send_bytes`). ``transport``: ``"auto"`` (CUDA IPC when the message holds CUDA
    tensors and every consumer runs on this machine: docs/transports.md), ``"host"`` or ``"cuda-ipc"``.
    -> False when CUDA IPC's ``on_full="drop"`` dropped the message, else True."""
    link = Link.of(node)
    out = link.outputs.get(output_id) or link.output(output_id)  # (a builtin call when it exists: every message)
    return out.send(obj, metadata, transport=transport)


def send_plain(node: Any, output_id: str, tensor: Any, metadata: dict | None = None) -> None:
    """Send `tensor`'s logical values (row-major, native byte order) as a flat UInt8 message with
    no codec keys: exactly what a dora image node expects for ``encoding: rgb8`` when given an
    (H, W, 3) tensor, even a permuted view of a (3, H, W) one. One strided pass straight into
    dora's send buffer, with the same route checks as `send`."""
    Link.of(node).output(output_id).send_plain(tensor, metadata)


def transport_for(node: Any, output_id: str, obj: Any) -> tuple[str, str]:
    """-> (transport, why): what ``send(node, output_id, obj)`` would use, and the reason (the
    consumers' placement, the data's device, ``TC_TRANSPORT``). Nothing is sent."""
    return Link.of(node).output(output_id).transport_for(obj)


def max_send_bytes(node: Any, output_id: str, *, metadata_bytes: int | None = None, guaranteed: bool = False) -> int:
    """The most payload bytes (a codec message's tensors, each padded to 64 bytes: what
    ``tc.encode(obj)[0]`` holds) one message on `output_id` can ever carry through dora 1.1
    (``guaranteed=True``: every time, the daemon path's limit), with `metadata_bytes` of metadata
    (dora.limits.METADATA_RESERVE by default). docs/transports.md, "dora's limits on one message"."""
    return Link.of(node).output(output_id).max_send_bytes(metadata_bytes=metadata_bytes, guaranteed=guaranteed)
