"""tensor_codec: move PyTorch tensors, TVTensors and nested structures through dora-rs.

    import tensor_codec as tc
    value, metadata = tc.encode(obj)            # -> (pyarrow.Array, dict)
    obj = tc.decode(value, metadata)            # the inverse
    tc.send(node, "output_id", obj, metadata)   # encode straight into dora's send buffer
    obj = tc.receive(event)                     # decode a dora INPUT event
    tc.send_plain(node, "image", hwc_tensor)    # flat bytes for non-codec consumers
    tc.max_send_bytes(node, "output_id")        # the most payload bytes one message there can carry
    tc.send(node, "out", cuda_obj)              # transport="auto": CUDA IPC to consumers on this
                                                # machine, host bytes to others (see routing.py)
    obj = tc.receive(event, device="cuda")      # restored onto this process's GPU, whatever the path
    out = tc.stamp(obj, tc.carry(event["metadata"]))  # keys an input's metadata passes on, plus a
    tc.send(node, "boxes", obj, out)            # checksum and sent_ns: a receiver verifies and times it
    print(tc.describe(event["metadata"]))       # what a message holds, from its header: nothing decoded

See README.md and docs/wire-format.md.
"""

from typing import TYPE_CHECKING

from . import versions as _versions

_versions.require()  # a preinstalled torch (container, GPU host) is not checked by pip: say what is wrong

from .codec import decode, encode
from .dora import max_send_bytes, receive, send, send_plain, transport_for
from .errors import (
    CodecError,
    DecodeError,
    EncodeError,
    InFlightLimitError,
    MessageTooLargeError,
    ReleasedError,
    SharedViewWriteError,
    UsageError,
)
from .lifetimes import keep, release, scope
from .limits import Limits, set_limits
from .limits import current as get_limits

if TYPE_CHECKING:
    from .cuda_ipc.transport import CudaIpcTransport


def _cuda_ipc() -> "CudaIpcTransport":
    from .transports import get_transport
    from .transports.names import CUDA_IPC

    return get_transport(CUDA_IPC)  # type: ignore[return-value]  # the CUDA IPC transport


def ipc_configure(
    output_id: str,
    *,
    max_bytes_in_flight: int | None = None,
    on_full: str | None = None,
    timeout_s: float | None = None,
) -> None:
    """Cap the bytes one output has in flight with transport='cuda-ipc' (default 1 GiB) and say
    what `send` does past it: ``on_full="wait"`` (default; up to `timeout_s`, default 5 s, then
    `InFlightLimitError`) or ``"drop"`` (not sent, counted, logged; `send` returns False)."""
    _cuda_ipc().configure(output_id, max_bytes_in_flight=max_bytes_in_flight, on_full=on_full, timeout_s=timeout_s)


def ipc_flush(timeout_s: float = 10.0) -> bool:
    """Wait until receivers released everything this process sent with transport='cuda-ipc'
    (call before a producer exits: its GPU memory goes with it); False on timeout."""
    return _cuda_ipc().flush(timeout_s)


def ipc_stats() -> dict:
    """This process's CUDA IPC counters: per output sent (bytes in flight, peak, drops at the cap,
    waits, messages lost on the way: given up unclaimed, as dora dropped them),
    its message buffers (made, reused, idle) and as a receiver (claims, releases, opened
    segments and events, cache hits)."""
    return _cuda_ipc().stats()


def ipc_trim() -> int:
    """Give this process's idle CUDA IPC message buffers back to torch's caching allocator; ->
    how many. Sending keeps released buffers for the next messages (exported once, so a steady
    stream allocates nothing): call this when a burst is over and the memory is wanted elsewhere."""
    return _cuda_ipc().trim()


from .describe import Description, describe, message_transport
from .metadata import carry, stamp
from .pinning import pin_memory
from .plain import plain_bytes
from .tree import map_tensors
from .wire.header import VERSION as WIRE_VERSION
from .wire.header import is_codec_message
from .wire.tree import register_namedtuple

__version__ = "0.1.0"

__all__ = [
    "encode",
    "decode",
    "send",
    "receive",
    "transport_for",
    "send_plain",
    "max_send_bytes",
    "stamp",
    "carry",
    "describe",
    "Description",
    "is_codec_message",
    "message_transport",
    "plain_bytes",
    "scope",
    "release",
    "keep",
    "pin_memory",
    "map_tensors",
    "register_namedtuple",
    "CodecError",
    "EncodeError",
    "DecodeError",
    "MessageTooLargeError",
    "InFlightLimitError",
    "ipc_configure",
    "ipc_stats",
    "ipc_flush",
    "ipc_trim",
    "SharedViewWriteError",
    "ReleasedError",
    "UsageError",
    "Limits",
    "get_limits",
    "set_limits",
    "WIRE_VERSION",
]
