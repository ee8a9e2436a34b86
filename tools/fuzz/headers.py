"""What the mutators know about the header's meaning (docs/wire-format.md), so a mutated message can
be made consistent again and reach the decoder's deeper checks instead of its first one:

* `tensor_nodes`: the tree's tensor nodes in the decoder's depth-first order;
* `renumber`: give tensor nodes leaf numbers 0, 1, 2... in that order and rebuild the leaf table
  to match (a tensor node duplicated or moved by a mutation gets its own leaf entry);
* `fixup`: recompute each leaf's `nbytes` from its layout where the layout is one a writer may
  produce, the canonical offsets, and an Arrow value of exactly the right length that keeps each
  leaf's old bytes (bool leaves 0/1);
* `random_layout`, `random_leaf`, `random_tensor_node`: valid-looking pieces to insert;
* `VERSION`, `TRANSPORTS`, `top_keys`, `transport_of`: the header's envelope (wire format 2 keeps
  its version and transport in the header: ``{"version":2,"transport":...,"leaves":...,"tree":...}``).
"""

from __future__ import annotations

import random
from typing import Any

from .jsongen import BOX_FORMATS, DTYPE_NAMES, ITEMSIZE, TENSOR_TAGS
from .values import uint8_recipe

__all__ = [
    "VERSION",
    "TRANSPORTS",
    "ENVELOPE_KEYS",
    "V1_KEYS",
    "top_keys",
    "transport_of",
    "ITEMSIZE",
    "ALIGNMENT",
    "PACKED_FIELDS",
    "MAX_FIXUP_BYTES",
    "tensor_nodes",
    "leaf_table",
    "required_nbytes",
    "renumber",
    "fixup",
    "random_layout",
    "random_leaf",
    "random_tensor_node",
]

# The fuzzer's own oracle, written independently of the codec on purpose (a slip in one shows as a
# disagreement with the other); tests/codec/test_fuzz_oracle.py ties each to the codec's table.
ALIGNMENT = {"host": 64, "cuda-ipc": 256}
VERSION = 2  # the wire format's version, the int the header's `version` member holds
# Each transport's name, with the top-level header keys it adds to the envelope's.
TRANSPORTS = {"host": ("gpu",), "cuda-ipc": ("producer",)}
ENVELOPE_KEYS = ("version", "transport", "leaves", "tree")  # every header's, in the writers' order
# Version 1's metadata keys beside tc.header: a message with `tc.version` is one a reader refuses.
V1_KEYS = ("tc.version", "tc.transport")
MAX_FIXUP_BYTES = 4 << 20  # an Arrow value rebuilt by fixup stays under this
_LOW_BIT = bytes(b & 1 for b in range(256))
PACKED_FIELDS = ("data", "batch_sizes", "sorted_indices", "unsorted_indices")


def tensor_nodes(node: Any, out: list | None = None, depth: int = 0) -> list[dict]:
    """Tensor nodes of a tree in the order the decoder numbers leaves."""
    out = [] if out is None else out
    if depth > 200 or type(node) is not dict:
        return out
    tag = node.get("t")
    if tag in TENSOR_TAGS:
        out.append(node)
    elif tag in ("list", "tuple", "namedtuple"):
        items = node.get("items")
        if type(items) is list:
            for item in items:
                tensor_nodes(item, out, depth + 1)
    elif tag == "dict":
        items = node.get("items")
        if type(items) is list:
            for pair in items:
                if type(pair) is list and len(pair) == 2:
                    tensor_nodes(pair[1], out, depth + 1)
    elif tag == "PackedSequence":
        for field in PACKED_FIELDS:
            tensor_nodes(node.get(field), out, depth + 1)
    return out


def top_keys(transport: str) -> frozenset:
    """The top-level keys a header of `transport` may have (a known transport)."""
    return frozenset(ENVELOPE_KEYS) | frozenset(TRANSPORTS[transport])


def transport_of(header: Any, default: str = "host") -> str:
    """The header's `transport` member where it is a string, else `default`."""
    transport = header.get("transport") if type(header) is dict else None
    return transport if type(transport) is str else default


def leaf_table(header: Any) -> list[dict]:
    """The header's leaf entries that are objects (empty when there is no such table)."""
    if type(header) is not dict or type(header.get("leaves")) is not list:
        return []
    return [e for e in header["leaves"] if type(e) is dict]


def _int_list(x: Any) -> bool:
    return type(x) is list and all(type(v) is int for v in x)


def required_nbytes(itemsize: int, shape: list[int], strides: list[int]) -> int | None:
    """What a writer sends for this layout (docs/wire-format.md section 6), None if none would."""
    if any(s == 0 for s in shape):
        return 0
    dims = sorted((st, sz) for sz, st in zip(shape, strides) if sz > 1 and st != 0)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return None
        expected *= sz
    return itemsize * expected


def renumber(header: dict, rng: random.Random) -> None:
    """Number the tree's tensor nodes 0, 1, 2... and make the leaf table match them."""
    old = header.get("leaves") if type(header.get("leaves")) is list else []
    new = []
    for i, node in enumerate(tensor_nodes(header.get("tree"))):
        index = node.get("leaf")
        if type(index) is int and 0 <= index < len(old) and type(old[index]) is dict:
            entry = dict(old[index])
        else:
            entry = random_leaf(rng)
        node["leaf"] = i
        new.append(entry)
    header["leaves"] = new


def fixup(header: Any, transport: str, old_bytes: bytes | None, rng: random.Random) -> tuple[dict, int] | None:
    """Make nbytes, offsets and the value agree with the leaves' layouts. -> (value recipe, total
    length), or None when the leaf table is too broken (or too big) to lay out."""
    leaves = leaf_table(header)
    if not leaves or len(leaves) != len(header["leaves"]):
        return None if leaves else (uint8_recipe(b""), 0)
    align = ALIGNMENT.get(transport, 64)
    plan = []
    end = 0
    for i, leaf in enumerate(leaves):
        dtype, shape, strides = leaf.get("dtype"), leaf.get("shape"), leaf.get("strides")
        if (
            type(dtype) is str
            and dtype in ITEMSIZE
            and _int_list(shape)
            and _int_list(strides)
            and len(shape) == len(strides)
            and rng.random() < 0.95
        ):
            need = required_nbytes(ITEMSIZE[dtype], shape, strides)
            if need is not None:
                leaf["nbytes"] = need
        nbytes = leaf.get("nbytes")
        if type(nbytes) is not int or not 0 <= nbytes <= MAX_FIXUP_BYTES:
            return None
        start = (end + align - 1) // align * align if i else 0
        old_offset = leaf.get("offset")
        plan.append((start, nbytes, old_offset if type(old_offset) is int else None, dtype == "bool"))
        leaf["offset"] = start
        end = start + nbytes
        if end > MAX_FIXUP_BYTES:
            return None
    data = bytearray(end)
    old = old_bytes or b""
    for start, nbytes, old_offset, is_bool in plan:
        chunk = b""
        if old_offset is not None and 0 <= old_offset < len(old):
            chunk = old[old_offset : old_offset + nbytes]
        if len(chunk) < nbytes:
            chunk = chunk + rng.randbytes(nbytes - len(chunk))
        if is_bool and rng.random() < 0.9:
            chunk = chunk.translate(_LOW_BIT)
        data[start : start + nbytes] = chunk
    return uint8_recipe(bytes(data)), end


def random_layout(rng: random.Random) -> tuple[str, list[int], list[int], int]:
    """A dtype and a layout a writer may produce, with its nbytes: row-major or permuted dense
    dims, broadcast dims (stride 0, sometimes huge), size-1 dims with any stride, empty tensors."""
    dtype = rng.choice(DTYPE_NAMES)
    rank = rng.choice([0, 1, 1, 2, 2, 3, 3, 4, 5, 8, 64])
    shape = [rng.choice([1, 1, 1, 2, 3, 4, 5, 7, 8, 16, 64]) for _ in range(rank)]
    if rank and rng.random() < 0.1:
        shape[rng.randrange(rank)] = 0
    dense = 1
    for d in range(rank):  # keep the real data small
        if dense * shape[d] > 1 << 16:
            shape[d] = 1
        dense *= max(shape[d], 1)
    strides = [0] * rank
    broadcast = [d for d in range(rank) if shape[d] > 1 and rng.random() < 0.15]
    for d in broadcast:
        if rng.random() < 0.3:
            shape[d] = rng.choice([1000, 1 << 16, 1 << 20, 1 << 31])
    real = [d for d in range(rank) if shape[d] > 1 and d not in broadcast]
    if rng.random() < 0.5:
        rng.shuffle(real)  # a permuted dense layout (transposed, channels_last...)
    else:
        real.sort(reverse=True)  # row-major
    step = 1
    for d in real:
        strides[d] = step
        step *= shape[d]
    for d in range(rank):
        if shape[d] <= 1:
            strides[d] = rng.choice([0, 1, 1, 3, step, 2**62])
    if 0 in shape:
        strides = [rng.choice([0, 1, 5, 2**62]) for _ in range(rank)]
    nbytes = required_nbytes(ITEMSIZE[dtype], shape, strides)
    return dtype, shape, strides, nbytes if nbytes is not None else 0


def random_leaf(rng: random.Random) -> dict:
    dtype, shape, strides, nbytes = random_layout(rng)
    return {"dtype": dtype, "shape": shape, "strides": strides, "nbytes": nbytes, "offset": 0}


def random_tensor_node(rng: random.Random, index: int = 0) -> dict:
    tag = rng.choice(TENSOR_TAGS)
    node: dict = {"t": tag, "leaf": index}
    if tag in ("tv.BoundingBoxes", "tv.KeyPoints"):
        node["canvas_size"] = [rng.choice([0, 1, 48, 2**31 - 1]), rng.choice([0, 7, 64])]
    if tag == "tv.BoundingBoxes":
        node["format"] = rng.choice(BOX_FORMATS)
        if rng.random() < 0.5:
            node["clamping_mode"] = rng.choice(["soft", "hard", None])
    if rng.random() < 0.1:
        node["grad"] = True
    return node
