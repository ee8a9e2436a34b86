"""Random JSON for the mutators: interesting scalars (boundary integers, non-finite and huge number
tokens, the format's own names), containers, deep nesting; and `HeaderText`, a header held as a
tree that serializes back to text with *textual* edits no JSON library writes (duplicate keys,
raw tokens such as ``NaN`` or ``1e400``, integers too long for Python's int parser).
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = [
    "DTYPE_NAMES",
    "ITEMSIZE",
    "BAD_DTYPE_NAMES",
    "TENSOR_TAGS",
    "TREE_TAGS",
    "BOX_FORMATS",
    "INTS",
    "DIM_INTS",
    "FLOATS",
    "RAW_NUMBERS",
    "STRINGS",
    "KEYS",
    "random_scalar",
    "random_json",
    "random_int",
    "HeaderText",
]

# Every dtype name of the format, with its item size (the fuzzer's oracle: tied to the codec's
# table by tests/codec/test_fuzz_oracle.py).
ITEMSIZE = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "uint16": 2,
    "int16": 2,
    "uint32": 4,
    "int32": 4,
    "uint64": 8,
    "int64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "complex32": 4,
    "complex64": 8,
    "complex128": 16,
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
}
DTYPE_NAMES = list(ITEMSIZE)
BAD_DTYPE_NAMES = [
    "qint8",
    "quint8",
    "int4",
    "uint1",
    "uint7",
    "Float32",
    "float",
    "half",
    "torch.float32",
    "bits8",
    "",
    "float32 ",
]
TENSOR_TAGS = ["tensor", "tv.Image", "tv.Video", "tv.Mask", "tv.BoundingBoxes", "tv.KeyPoints"]
TREE_TAGS = TENSOR_TAGS + ["list", "tuple", "dict", "namedtuple", "PackedSequence", "float", "tv.Other", "Tensor", ""]
BOX_FORMATS = ["XYXY", "XYWH", "CXCYWH", "XYWHR", "CXCYWHR", "XYXYXYXY"]

INTS = [
    0,
    1,
    -1,
    2,
    3,
    7,
    8,
    63,
    64,
    65,
    255,
    256,
    4095,
    4096,
    65535,
    65536,
    2**31 - 1,
    2**31,
    2**32,
    2**48,
    2**48 + 1,
    2**53,
    2**53 + 1,
    2**62 - 1,
    2**62,
    2**62 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**31),
    -(2**63),
    -(2**63) - 1,
    10**30,
    -(10**30),
]
DIM_INTS = [
    0,
    1,
    1,
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    16,
    64,
    100,
    1000,
    2**20,
    2**31,
    2**32,
    2**40,
    2**61,
    2**62,
    2**62 + 1,
    -1,
    2**63,
]
FLOATS = [0.0, -0.0, 0.5, 1.0, -1.5, 3.0, 64.0, 1e16, 2.0**62, 1e308, -1e308, 5e-324, 1e-300]
RAW_NUMBERS = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    "1E2",
    "-0",
    "1.0e-400",
    "0e0",
    "1" + "0" * 5000,
    "123456789012345678901234567890",
    "-9223372036854775809",
    "9223372036854775808",
    "4611686018427387905",
    "0.1e1",
    "1.",
    "01",
    "+1",
    ".5",
    "0x10",
]
STRINGS = [
    "",
    "tensor",
    "list",
    "tuple",
    "dict",
    "namedtuple",
    "PackedSequence",
    "float",
    "tv.Image",
    "tv.BoundingBoxes",
    "tv.KeyPoints",
    "tv.Other",
    "nan",
    "inf",
    "-inf",
    "NaN",
    "XYXY",
    "xyxy",
    "CXCYWHR",
    "soft",
    "hard",
    "host",
    "cuda-ipc",
    "\u0000",
    "\ud800",
    "\udfff",
    "\u00e9",
    "\U0001f600",
    "\ufeff",
    "class",
    "_x",
    "x" * 257,
    "a.b.c",
    "1x",
    "a b",
    "__init__",
    "items",
    "leaf",
    "t",
    "uint8",
    "bool",
    "float32",
    "complex32",
    "float4_e2m1fn_x2",
    "qint8",
]
KEYS = [
    "t",
    "leaf",
    "items",
    "grad",
    "format",
    "canvas_size",
    "clamping_mode",
    "v",
    "name",
    "fields",
    "data",
    "batch_sizes",
    "sorted_indices",
    "unsorted_indices",
    "dtype",
    "shape",
    "strides",
    "nbytes",
    "offset",
    "version",
    "transport",
    "leaves",
    "tree",
    "producer",
    "host",
    "pid",
    "pidns",
    "gpu",
    "ledger",
    "",
    "x",
    "\u00e9",
    "__proto__",
]

_MAX_LONG_STRING = 1 << 20  # keeps a mutated header near a megabyte at most


def random_int(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.6:
        return rng.choice(INTS)
    if r < 0.9:
        return rng.randrange(-5, 300)
    return rng.randrange(-(2**70), 2**70)


def random_scalar(rng: random.Random, text: HeaderText | None = None) -> Any:
    r = rng.random()
    if r < 0.1:
        return None
    if r < 0.2:
        return rng.random() < 0.5
    if r < 0.45:
        return random_int(rng)
    if r < 0.55:
        return rng.choice(FLOATS)
    if r < 0.62 and text is not None:
        return text.raw(rng.choice(RAW_NUMBERS))
    if r < 0.9:
        return rng.choice(STRINGS + DTYPE_NAMES + BAD_DTYPE_NAMES + BOX_FORMATS + TREE_TAGS)
    if r < 0.97:
        return "".join(rng.choice('ab\u00e9\u0000"\\/\n{}[]:,') for _ in range(rng.randrange(1, 12)))
    return "s" * rng.choice([1000, 70_000, 300_000, _MAX_LONG_STRING])


def random_json(rng: random.Random, depth: int = 0, text: HeaderText | None = None) -> Any:
    """A random JSON value: mostly scalars, some containers, now and then deep nesting."""
    r = rng.random()
    if depth > 3 or r < 0.6:
        return random_scalar(rng, text)
    if r < 0.75:
        return [random_json(rng, depth + 1, text) for _ in range(rng.randrange(0, 5))]
    if r < 0.9:
        return {rng.choice(KEYS): random_json(rng, depth + 1, text) for _ in range(rng.randrange(0, 5))}
    if r < 0.95:
        return _deep(rng, rng.choice([10, 63, 64, 65, 66, 200]))
    if r < 0.98:
        return [rng.choice([0, None, "x"])] * rng.choice([100, 10_000, 60_000])  # many items
    return text.raw("[" * 50_000 + "]" * 50_000) if text is not None else []


def _deep(rng: random.Random, depth: int) -> Any:
    """Nesting that is a valid tree at every level (list/tuple/dict/namedtuple nodes) or plain arrays."""
    node: Any = rng.choice([0, None, "x", {"t": "float", "v": "nan"}])
    kind = rng.choice(["tree", "array", "dict"])
    for _ in range(depth):
        if kind == "tree":
            node = rng.choice(
                [
                    {"t": "list", "items": [node]},
                    {"t": "tuple", "items": [node]},
                    {"t": "dict", "items": [["k", node]]},
                    {"t": "namedtuple", "name": "N", "fields": ["a"], "items": [node]},
                ]
            )
        elif kind == "array":
            node = [node]
        else:
            node = {"k": node}
    return node


class HeaderText:
    """A header (or any JSON document) being edited as a tree, written back as text.

    Textual edits are made through placeholders: `raw` returns a unique string that the
    serializer replaces, quotes included, by the raw text; `duplicate_key` adds a placeholder key
    that is renamed to an existing key of the same object in the text.
    """

    def __init__(self, tree: Any):
        self.tree = tree
        self._subs: dict[str, str] = {}

    @classmethod
    def parse(cls, text: Any) -> HeaderText | None:
        if type(text) is not str:
            return None
        try:
            return cls(json.loads(text))
        except (ValueError, RecursionError):
            return None

    def raw(self, token: str) -> str:
        name = f"\u0001tcfuzz{len(self._subs)}\u0001"
        self._subs[json.dumps(name, ensure_ascii=False)] = token
        return name

    def duplicate_key(self, obj: dict, key: str, value: Any) -> None:
        name = f"\u0001tcfuzz{len(self._subs)}\u0001"
        obj[name] = value
        self._subs[json.dumps(name, ensure_ascii=False)] = json.dumps(key, ensure_ascii=False)

    def dumps(self, rng: random.Random | None = None) -> str:
        ascii_only = rng is not None and rng.random() < 0.1
        text = json.dumps(self.tree, separators=(",", ":"), ensure_ascii=ascii_only, allow_nan=True)
        for quoted, token in self._subs.items():  # control characters are escaped either way
            text = text.replace(quoted, token)
        return text
