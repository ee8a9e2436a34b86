"""The Arrow value of a case, as a *recipe*: plain data (tools/fuzz/encoding.py can write it) that
`build` turns into the object handed to the decoder. A reproducer stores the recipe, so replaying
it rebuilds exactly the same object: the same bytes, Arrow type, slice offset, validity bitmap
and even the alignment of the data buffer's address (which decides whether the decoder views
the bytes in place or copies them).

Recipes (dicts, key ``kind``):

* ``uint8``: ``data`` (bytes, including ``offset`` leading bytes the array skips), ``offset`` (the
  Arrow array's slice offset), ``misalign`` (the data buffer starts this many bytes past a 64-byte
  boundary), ``validity`` (a validity bitmap, bytes or None) and ``null_count`` (-1: computed);
* ``arrow``: ``type`` (a name from `ARROW_TYPES`), ``items`` (Python values for ``pyarrow.array``),
  ``slice`` (``[offset, length]`` or None);
* ``chunked``: ``chunks`` (recipes of Arrow arrays) -> a ``pyarrow.ChunkedArray``;
* ``py``: ``value`` handed over as it is (None, bytes, an int, a list...);
* ``numpy`` / ``torch`` / ``buffer``: ``data`` as a numpy uint8 array, a torch uint8 tensor, a
  ``pyarrow.Buffer``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import torch

__all__ = ["ARROW_TYPES", "build", "uint8_recipe", "logical_bytes", "describe"]

ARROW_TYPES = {
    "uint8": pa.uint8(),
    "int8": pa.int8(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "fixed_binary1": pa.binary(1),
    "list_uint8": pa.list_(pa.uint8()),
    "large_list_uint8": pa.large_list(pa.uint8()),
    "struct": pa.struct([("a", pa.uint8())]),
    "null": pa.null(),
}


def uint8_recipe(
    data: bytes, *, offset: int = 0, misalign: int = 0, validity: bytes | None = None, null_count: int = -1
) -> dict:
    return {
        "kind": "uint8",
        "data": bytes(data),
        "offset": offset,
        "misalign": misalign,
        "validity": validity,
        "null_count": null_count,
    }


def _aligned_buffer(data: bytes, misalign: int) -> pa.Buffer:
    """`data` in fresh memory starting `misalign` bytes past a 64-byte boundary."""
    buf = pa.allocate_buffer(len(data) + misalign)  # Arrow's allocator aligns to 64 bytes
    if data:
        np.frombuffer(buf, dtype=np.uint8)[misalign:] = np.frombuffer(data, dtype=np.uint8)
    return buf.slice(misalign) if misalign else buf


def build(recipe: dict) -> Any:
    kind = recipe["kind"]
    if kind == "uint8":
        data, offset = recipe["data"], recipe["offset"]
        validity = recipe["validity"]
        buffers = [None if validity is None else pa.py_buffer(validity), _aligned_buffer(data, recipe["misalign"])]
        return pa.Array.from_buffers(
            pa.uint8(), len(data) - offset, buffers, null_count=recipe["null_count"], offset=offset
        )
    if kind == "arrow":
        arr = pa.array(recipe["items"], type=ARROW_TYPES[recipe["type"]])
        if recipe["slice"] is not None:
            arr = arr.slice(*recipe["slice"])
        return arr
    if kind == "chunked":
        chunks = [build(c) for c in recipe["chunks"]]
        return pa.chunked_array(chunks, type=chunks[0].type if chunks else pa.uint8())
    if kind == "py":
        return recipe["value"]
    if kind == "numpy":
        return np.frombuffer(recipe["data"], dtype=np.uint8).copy()
    if kind == "torch":
        return torch.tensor(list(recipe["data"]), dtype=torch.uint8)
    if kind == "buffer":
        return pa.py_buffer(recipe["data"])
    raise ValueError(f"unknown value recipe kind {kind!r}")


def logical_bytes(recipe: dict) -> bytes | None:
    """The bytes a uint8 recipe's array holds (what the decoder reads), else None."""
    if recipe["kind"] != "uint8":
        return None
    return recipe["data"][recipe["offset"] :]


def describe(recipe: dict) -> str:
    kind = recipe["kind"]
    if kind == "uint8":
        n = len(recipe["data"]) - recipe["offset"]
        extra = "".join(f" {k}={recipe[k]}" for k in ("offset", "misalign") if recipe[k]) + (
            " validity" if recipe["validity"] is not None else ""
        )
        return f"uint8[{n}]{extra}"
    if kind == "arrow":
        return f"arrow {recipe['type']}[{len(recipe['items'])}]" + (
            f" slice {recipe['slice']}" if recipe["slice"] else ""
        )
    if kind == "chunked":
        return f"chunked x{len(recipe['chunks'])}"
    if kind == "py":
        return f"python {type(recipe['value']).__name__}"
    return f"{kind}[{len(recipe['data'])}]"
