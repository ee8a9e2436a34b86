"""tensor_codec: move PyTorch tensors, TVTensors and nested structures through dora-rs.

``import tensor_codec as tc``: every call, its errors and guarantees are in docs/api.md (a short
example in README.md); the bytes on the wire in docs/wire-format.md.
"""

from . import versions as _versions
from .codec import decode, encode
from .cuda_ipc import ipc_configure, ipc_flush, ipc_stats, ipc_trim
from .describe import Description, describe, message_transport
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
from .metadata import carry, stamp
from .pinning import pin_memory
from .plain import plain_bytes
from .tree import map_tensors
from .wire.header import VERSION as WIRE_VERSION
from .wire.header import is_codec_message
from .wire.tree import register_namedtuple

# Stays on import: pip never checks a preinstalled torch (container, GPU host); say what is wrong before any call.
_versions.require()

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
