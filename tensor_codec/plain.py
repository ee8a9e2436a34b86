"""Plain bytes for consumers that do not speak the codec (dora's image nodes, plotting, recording):
`plain_bytes` reads what `tc.send_plain` (dora/output.py) writes, one tensor's values in row-major
order as a flat UInt8 message with no codec keys.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import torch

from .errors import DecodeError
from .wire.buffer import HOST_ALIGNMENT

__all__ = ["plain_bytes"]


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
    if address % HOST_ALIGNMENT == 0:  # as a host message is viewed
        return torch.from_dlpack(value)
    return torch.from_numpy(value.to_numpy(zero_copy_only=False).copy())
