"""The transport seam: one small interface (base.py), chosen per message by the header's
``transport`` member: host bytes in the Arrow value (``"host"``), or GPU memory shared across
processes (``"cuda-ipc"``, the cuda_ipc package). Transports are imported on first use from this
fixed table, so ``import tensor_codec`` never loads CUDA code and a name that arrives in a message
can only select one of these.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType

from ..errors import CodecError, DecodeError, EncodeError
from ..wire.header import TRANSPORT_FIELD
from .base import ENCODE_OUTPUT, Outgoing, Output, Transport
from .names import CUDA_IPC, HOST, NAMES

__all__ = [
    "Outgoing",
    "Output",
    "ENCODE_OUTPUT",
    "get_transport",
    "transport_for_message",
    "NAMES",
]

# name -> "module:Class", relative to this package
_TABLE = MappingProxyType(
    {
        HOST: ".host:HostTransport",
        CUDA_IPC: "..cuda_ipc.transport:CudaIpcTransport",
    }
)
_loaded: dict[str, Transport] = {}


def _load(name: object, error: type[CodecError], field: str) -> Transport:
    """The transport `name` selects, made on first use; any other name is `error` naming `field`."""
    transport = _loaded.get(name) if isinstance(name, str) else None  # a str Enum's member too
    if transport is None:
        if not isinstance(name, str) or name not in _TABLE:
            raise error(f"{field}: expected one of {list(_TABLE)}, got {name!r:.80}")
        module_name, _, cls_name = _TABLE[name].partition(":")
        module = importlib.import_module(module_name, __name__)
        transport = _loaded[name] = getattr(module, cls_name)()
    return transport


def get_transport(name: object) -> Transport:
    """A transport for sending; unknown names are a caller error."""
    transport = _loaded.get(name) if isinstance(name, str) else None  # the send path's: one call
    return _load(name, EncodeError, "unsupported transport") if transport is None else transport


def transport_for_message(name: str) -> Transport:
    """A transport named by a received message (asked once per header: received.py caches it)."""
    return _load(name, DecodeError, TRANSPORT_FIELD)
