"""The one table of dtypes the wire format knows (docs/wire-format.md, section 4, which says what a
reader does with one its torch lacks): wire name, item size (the wire's, fixed here, not read from
torch: a test checks that torch agrees), torch dtype. torch's sub-byte ``int1..int7`` /
``uint1..uint7`` shells are left out: torch has no copy kernel for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch

from ..errors import DecodeError, EncodeError, Where, format_path

__all__ = ["WireDType", "WIRE_DTYPES", "by_name", "by_torch", "supported_torch_dtypes"]


@dataclass(frozen=True)
class WireDType:
    name: str
    itemsize: int
    torch_dtype: torch.dtype | None  # None where this torch build lacks the dtype
    is_bool: bool = False
    can_require_grad: bool = False  # floating point and complex dtypes


# (wire name, item size in bytes, autograd-capable). Order is for humans; the format uses names.
_TABLE: tuple[tuple[str, int, bool], ...] = (
    ("bool", 1, False),
    ("uint8", 1, False),
    ("int8", 1, False),
    ("uint16", 2, False),
    ("int16", 2, False),
    ("uint32", 4, False),
    ("int32", 4, False),
    ("uint64", 8, False),
    ("int64", 8, False),
    ("float16", 2, True),
    ("bfloat16", 2, True),
    ("float32", 4, True),
    ("float64", 8, True),
    ("complex32", 4, True),
    ("complex64", 8, True),
    ("complex128", 16, True),
    ("float8_e4m3fn", 1, True),
    ("float8_e4m3fnuz", 1, True),
    ("float8_e5m2", 1, True),
    ("float8_e5m2fnuz", 1, True),
    ("float8_e8m0fnu", 1, True),
    ("float4_e2m1fn_x2", 1, True),
)

WIRE_DTYPES: Mapping[str, WireDType] = MappingProxyType(
    {
        name: WireDType(
            name=name,
            itemsize=size,
            torch_dtype=getattr(torch, name, None),
            is_bool=(name == "bool"),
            can_require_grad=grad,
        )
        for name, size, grad in _TABLE
    }
)

_BY_TORCH: Mapping[torch.dtype, WireDType] = MappingProxyType(
    {d.torch_dtype: d for d in WIRE_DTYPES.values() if d.torch_dtype is not None}
)


def supported_torch_dtypes() -> list[torch.dtype]:
    """Every torch dtype this build can encode and decode."""
    return list(_BY_TORCH)


def by_torch(dtype: torch.dtype, path: tuple) -> WireDType:
    try:
        return _BY_TORCH[dtype]
    except KeyError:
        raise EncodeError(
            f"unsupported dtype at `{format_path(path)}`: expected one of "
            f"{', '.join(sorted(d.name for d in _BY_TORCH.values()))}, got {dtype}"
        ) from None


def by_name(name: object, where: str | Where) -> WireDType:
    entry = WIRE_DTYPES.get(name) if isinstance(name, str) else None
    if entry is None:
        raise DecodeError(
            f"{where}: expected a dtype name from the wire table ({', '.join(WIRE_DTYPES)}), got {name!r:.80}"
        )
    if entry.torch_dtype is None:
        raise DecodeError(
            f"{where}: dtype {name!r} is valid on the wire but this torch build ({torch.__version__}) does not have it"
        )
    return entry
