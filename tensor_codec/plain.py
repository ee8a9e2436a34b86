"""Plain bytes for consumers that do not speak the codec (dora's image nodes, plotting, recording).

`send_plain` writes one tensor's values in row-major order as a flat UInt8 message, with no codec
keys: exactly what a dora image node expects for ``encoding: rgb8`` when given an (H, W, 3)
tensor, even a permuted view of a (3, H, W) one. It is one strided pass straight into dora's send
buffer, with the same route checks as `tc.send`. `plain_bytes` is the receiving side: a flat
uint8 tensor over a message's bytes, zero-copy where dora's buffer allows.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from . import dora_limits
from .errors import DecodeError, EncodeError
from .layout import values_of

__all__ = ["send_plain", "plain_bytes"]

_ALIGNMENT = 64


def send_plain(node: Any, output_id: str, tensor: torch.Tensor, metadata: dict | None = None) -> None:
    """Send `tensor`'s logical values (row-major, native byte order) as a flat UInt8 message."""
    if not isinstance(tensor, torch.Tensor):
        raise EncodeError(f"tensor: expected a torch.Tensor, got {type(tensor).__qualname__}")
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
        raise EncodeError(f"tensor: expected a dense strided tensor with data, got layout {tensor.layout} on {tensor.device}")
    plain = values_of(tensor if type(tensor) is torch.Tensor else tensor.as_subclass(torch.Tensor), ())
    nbytes = plain.numel() * plain.element_size()
    dora_limits.check_route(node, output_id, nbytes)
    with dora_limits.translate_send_errors(node, output_id, nbytes):
        with node.send_output_raw(output_id, nbytes, metadata=dict(metadata or {})) as sample:
            if nbytes:
                array = np.frombuffer(sample, dtype=np.uint8)
                dest = None
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # complex32 is "experimental"
                        dest = torch.from_numpy(array).view(plain.dtype).view(plain.shape)
                    dest.copy_(plain)  # the one pass; handles permutes, crops and devices
                finally:
                    del dest, array  # no view of dora's buffer may outlive the send: dora reuses it


def plain_bytes(value: Any, *, name: str = "value") -> torch.Tensor:
    """A flat uint8 tensor over an Arrow UInt8 message (zero-copy when aligned, else one copy).

    The result views dora's read-only buffer: read it, do not write it or keep it past the event.
    """
    if not isinstance(value, pa.Array) or value.type != pa.uint8():
        got = value.type if isinstance(value, pa.Array) else type(value).__qualname__
        raise DecodeError(f"{name}: expected a flat pyarrow UInt8 array, got {got}")
    if value.null_count:
        raise DecodeError(f"{name}: expected no nulls, got {value.null_count}")
    if len(value) == 0:
        return torch.empty(0, dtype=torch.uint8)
    address = value.buffers()[1].address + value.offset
    if address % _ALIGNMENT == 0:
        return torch.from_dlpack(value)
    return torch.from_numpy(value.to_numpy(zero_copy_only=False).copy())
