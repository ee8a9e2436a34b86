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
    """Encode `obj` and send it on `output_id` of a dora node with one copy of each tensor's
    bytes: dora's own (``send_output`` of the tensor's memory) for one dense host tensor under
    32 MiB, else tc's, straight into dora's send buffer (``send_output_raw``). `metadata` holds
    the caller's own keys; keys starting with ``tc.`` are reserved. Raises
    `MessageTooLargeError` (naming the limit of dora's it is over, and what lifts it) before
    writing anything if no dora route can carry the message (`max_send_bytes` says how much can
    go).

    ``transport="auto"`` (default): CUDA IPC when the message holds CUDA tensors and every
    consumer of the output runs on this machine, host bytes otherwise; a message under
    ``TC_IPC_MIN_BYTES`` goes as host bytes that its receivers restore onto the same GPU
    (tensor_codec/routing.py has the rule; ``TC_TRANSPORT`` in the node's environment forces
    one). ``"host"``: bytes in the dora message. ``"cuda-ipc"``: CUDA tensors go to receivers on
    this machine without touching the host (see `tensor_codec.ipc_configure` for the cap on
    bytes in flight). Returns False when that cap's ``on_full="drop"`` policy dropped the
    message, else True."""
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
    consumers' placement, the data' device, ``TC_TRANSPORT``). Nothing is sent."""
    return Link.of(node).output(output_id).transport_for(obj)


def max_send_bytes(node: Any, output_id: str, *, metadata_bytes: int | None = None, guaranteed: bool = False) -> int:
    """The most payload bytes `tc.send` (or `tc.send_plain`) can carry in one message on
    `output_id` of `node`, given dora 1.1's routes: the 256 MiB cap, the node's shared-memory
    pool, and the daemon path's 64 MiB for outputs dora keeps there (a consumer declaring
    ``queue_policy: backpressure``, consumers on other machines reached through the daemons'
    relay). A bigger message is refused by `tc.send` with `MessageTooLargeError` before anything
    is written.

    This default is not a bound dora always honours: past the daemon path's limit (56.9 MiB), a
    message goes only through the pool, and dora sends on its daemon path, which refuses it,
    whenever the pool has no room for it at that moment (receivers hold messages, dora queues
    them) and, for the whole run, when the output's startup handshake with its consumers did not
    complete (seen on a loaded machine). With ``guaranteed=True`` it is the bound dora always
    honours on the output: the daemon path's limit (the same number on an output dora pins
    there). The default is the larger because it is what can ever go; a node that must never
    have a message refused sends at most the guaranteed bound.

    The payload of a codec message is its tensors' bytes, each padded to 64 bytes (what
    ``tc.encode(obj)[0]`` holds); `metadata_bytes` is what its metadata may take (the default,
    dora.limits.METADATA_RESERVE, covers the header of a few hundred tensors)."""
    out = Link.of(node).output(output_id)
    if metadata_bytes is None:
        return out.max_send_bytes(guaranteed=guaranteed)
    return out.max_send_bytes(metadata_bytes=metadata_bytes, guaranteed=guaranteed)
