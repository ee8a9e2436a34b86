"""The header (docs/wire-format.md, sections 1, 2 and 8): header objects to header text and back,
and the checks every receiver runs on it before a single data byte is interpreted (section 7).

This module turns text into objects and objects into text, nothing else: planning is plan.py's,
the cache of received headers received.py's, the bytes the transports'.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from ..errors import DecodeError, EncodeError, Where, format_path, some_keys
from . import header_json
from .dtypes import WireDType, by_name
from .leaf import MAX_DIM, MAX_RANK, check_leaf_layout
from .limits import Limits, check_logical_sizes
from .structure import DICT, NAMEDTUPLE, children_of

__all__ = [
    "VERSION",
    "KEY_HEADER",
    "RESERVED_PREFIX",
    "ReceivedLeaf",
    "leaf_table",
    "header_metadata",
    "read_metadata",
    "is_codec_message",
    "read_envelope",
    "TRANSPORT_FIELD",
    "parse_header",
    "split_header",
    "parse_leaf_table",
    "parse_leaves",
]

VERSION = 2
RESERVED_PREFIX = "tc."
KEY_HEADER = "tc.header"
# Version 1's own key for its version: a message with it is named as version 1's, never misread (wire-format.md 8).
V1_KEY_VERSION = "tc.version"
# The header's first members, every transport's (its envelope), in the order writers put them (wire-format.md 8).
VERSION_MEMBER = "version"
TRANSPORT_MEMBER = "transport"
TRANSPORT_FIELD = f"{KEY_HEADER}.{TRANSPORT_MEMBER}"  # how errors name the transport a header gives

# Compact, strict JSON (no NaN/Infinity tokens: the tree encodes non-finite floats itself).
# check_circular=False: the codec builds the tree itself and it cannot contain cycles.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False)


# `_JSON.encode` makes a C encoder (and a float formatter) anew on every call (json/encoder.py,
# `iterencode`), about a third of a small tree's encoding, paid for every new header: one is made
# here, with the arguments `_JSON` passes it, so the text is the same.
_C_ENCODER = json.encoder.c_make_encoder(  # type: ignore[attr-defined]  # CPython's, untyped
    None, _JSON.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
)


def _encode(obj: Any) -> str:
    return "".join(_C_ENCODER(obj, 0))


# The tree last (docs/wire-format.md, section 2): a stream repeats the text before it, which the
# sender keeps with the layout and the receiver with what it validated of it (received.py).
_TREE_MEMBER = ',"tree":'


def leaf_table(leaf_layouts: list, leaf_fields: list[dict]) -> str:
    """The header's leaf table as JSON text: each leaf's layout (`LeafLayout`) with the
    transport's own keys for it (`leaf_fields`). Written apart from the tree, so that a transport
    can keep it for every plan of the same layout (transports/host.py)."""
    leaves = []
    for leaf, fields in zip(leaf_layouts, leaf_fields):
        entry = {
            "dtype": leaf.dtype.name,
            "shape": list(leaf.shape),
            "strides": list(leaf.strides),
            "nbytes": leaf.nbytes,
        }
        entry.update(fields)
        leaves.append(entry)
    return _encode(leaves)


def header_metadata(tree: Any, table: str, transport: str, bounds: Limits, extra: dict | None = None) -> dict:
    """The codec's metadata for a message: its header text, the members in the order of
    docs/wire-format.md, section 2 (`extra`, the transport's keys, before the tree, where
    `split_header` reads them). A header receivers would refuse under `bounds` is refused here."""
    text = _envelope(transport) + '"leaves":' + table
    if extra:
        text += "," + _encode(extra)[1:-1]  # its members, without their braces
    text += _TREE_MEMBER + _encode(tree) + "}"
    # No UTF-8 text (dora's metadata, a Rust or C++ receiver) carries a lone surrogate. isascii
    # is O(1): only a header with non-ASCII text is searched.
    if not text.isascii() and header_json.lone_surrogate(text) is not None:
        raise EncodeError(_surrogate_in(tree, ()) or "header: expected text UTF-8 can carry, got a lone surrogate")
    header_json.check_cost(text, bounds, sending=True)
    return {KEY_HEADER: text}


@functools.cache
def _envelope(transport: str) -> str:
    """The header's text up to its leaf table: ``{"version":2,"transport":"host",``."""
    return "{" + _encode({VERSION_MEMBER: VERSION, TRANSPORT_MEMBER: transport})[1:-1] + ","


def _surrogate_in(node: Any, path: tuple) -> str | None:
    """Where in a tree (as tree.flatten writes it) a string holds a lone surrogate, in words, with
    the object's own path; None if nowhere."""
    texts: list[tuple[str, Any]] = []  # (what it is, text or not) of the node's own values
    if type(node) is str:
        texts = [("string", node)]
    elif type(node) is not dict:
        return None
    elif "leaf" in node:  # a tensor: its attributes (a TVTensor's) may hold text
        texts = [(f"attribute `{name}` of the tensor", value) for name, value in node.items()]
    elif node["t"] == DICT:
        texts = [("dict key", key) for key, _ in node["items"]]
    elif node["t"] == NAMEDTUPLE:
        texts = [("namedtuple name or field", text) for text in [node["name"], *node["fields"]]]
    for what, text in texts:
        found = header_json.lone_surrogate(text) if type(text) is str else None
        if found:
            got = header_json.describe_surrogate(text, found)
            return f"{what} at `{format_path(path)}`: expected text UTF-8 can carry, got {got}"
    for part, item in children_of(node) if type(node) is dict else ():  # none for a string or a tensor
        if found := _surrogate_in(item, path + (part,)):
            return found
    return None


@dataclass(slots=True)
class ReceivedLeaf:
    dtype: WireDType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    nbytes: int
    fields: dict  # the raw leaf entry; the transport reads and validates its own keys from it


def read_metadata(metadata: Any) -> str:
    """Check the codec's metadata key. -> the header's JSON text (its version and transport are
    checked with the rest of it, once per text the header cache keeps: `read_envelope`)."""
    if not isinstance(metadata, dict):
        raise DecodeError(f"metadata: expected a dict, got {type(metadata).__name__}")
    text = metadata.get(KEY_HEADER)
    if V1_KEY_VERSION in metadata:
        raise DecodeError(
            f"{V1_KEY_VERSION}: expected no such key (wire format {VERSION} keeps its version in {KEY_HEADER}), got "
            f"{metadata.get(V1_KEY_VERSION)!r:.80}: the sender writes an older wire format; send with this tensor_codec"
        )
    if type(text) is not str:
        if KEY_HEADER not in metadata:
            raise DecodeError(
                f"metadata: expected key {KEY_HEADER!r:.80} (not a tensor_codec message?), got keys "
                f"{some_keys(metadata)}"
            )
        raise DecodeError(f"{KEY_HEADER}: expected a JSON string, got {type(text).__name__}")
    return text


def is_codec_message(metadata: Any) -> bool:
    """Whether a message's metadata says it is tensor_codec's (of any version: `read_metadata`
    names one it cannot read). Nothing is validated."""
    return isinstance(metadata, dict) and (KEY_HEADER in metadata or V1_KEY_VERSION in metadata)


def read_envelope(header: dict) -> str:
    """A parsed header's version, checked, and the transport name it gives (a string; which
    names exist is the transports' table)."""
    version = header.get(VERSION_MEMBER)
    if type(version) is not int or version != VERSION:
        got = "missing" if VERSION_MEMBER not in header else f"{version!r:.80}"
        raise DecodeError(f"{KEY_HEADER}.{VERSION_MEMBER}: expected {VERSION}, got {got}")
    transport = header.get(TRANSPORT_MEMBER)
    if type(transport) is not str:
        got = "missing" if TRANSPORT_MEMBER not in header else f"{transport!r:.80}"
        raise DecodeError(f"{TRANSPORT_FIELD}: expected a transport name string, got {got}")
    return transport


def parse_header(text: str, bounds: Limits) -> dict:
    """Header text -> the header object, its cost checked before it is parsed. Its version and
    transport are `read_envelope`'s to read, its leaf table `parse_leaves`' (with that
    transport's keys)."""
    header_json.check_cost(text, bounds)  # before parsing: refusing costs one pass in C
    header = header_json.parse(text)
    if type(header) is not dict:
        raise DecodeError(f"{KEY_HEADER}: expected a JSON object, got {type(header).__name__}")
    return header


def split_header(text: str, bounds: Limits) -> tuple[str, Any] | None:
    """-> (the text before the tree, the tree) of a header written as `header_metadata` writes
    one, the tree last, its cost checked first as `parse_header` does; None for any other text
    (`parse_header` then reads it and names any problem)."""
    header_json.check_cost(text, bounds)
    cut = text.find(_TREE_MEMBER)
    if cut < 0:
        return None
    tree = header_json.parse_last_member(text, cut + len(_TREE_MEMBER))
    return None if tree is None else (text[:cut], tree[0])


def parse_leaf_table(table_text: str, tree: Any) -> dict | None:
    """The header of a split text (`split_header`), its leaf table not yet validated
    (`parse_leaves`); None when the text before the tree, closed by a brace, is not an object
    with ``leaves`` and without ``tree``. The grammar makes the two parts one header then: an
    object's members, then ``,"tree":`` and a value, then its closing brace, with no member
    named twice."""
    try:
        table = header_json.parse(table_text + "}")
    except DecodeError:
        return None  # the whole-text parse names the problem
    if type(table) is not dict or "leaves" not in table or "tree" in table:
        return None
    return {**table, "tree": tree}  # the members in the text's order


def parse_leaves(
    header: dict, transport_leaf_keys: frozenset, transport_header_keys: frozenset, bounds: Limits
) -> list[ReceivedLeaf]:
    """Validate the leaf table (and the header's top-level keys) without touching any data."""
    allowed_top = _allowed_top_keys(transport_header_keys)
    if not header.keys() <= allowed_top:
        extra = header.keys() - allowed_top
        raise DecodeError(f"tc.header: expected only keys {sorted(allowed_top)}, got unexpected {sorted(extra)}")
    if "tree" not in header:
        raise DecodeError("tc.header: expected key 'tree', missing")
    raw = header.get("leaves")
    if type(raw) is not list:
        raise DecodeError(f"tc.header.leaves: expected a list, got {type(raw).__name__}")
    if len(raw) > bounds.leaves:
        raise DecodeError(f"tc.header.leaves: expected at most {bounds.leaves} entries (limits.leaves), got {len(raw)}")
    allowed = _allowed_leaf_keys(transport_leaf_keys)
    out: list[ReceivedLeaf] = []
    leaf_cap, message_cap, total = bounds.leaf_logical_bytes, bounds.message_logical_bytes, 0
    for i, entry in enumerate(raw):
        if type(entry) is not dict or entry.keys() != allowed:
            _leaf_keys_error(entry, allowed, f"tc.header.leaves[{i}]")
        where = Where(("tc.header.leaves", "[{}]", i))  # rendered only if an error names it
        dtype = by_name(entry["dtype"], Where((where, ".dtype", None)))
        shape = _int_list(entry["shape"], i, "shape")
        strides = _int_list(entry["strides"], i, "strides")
        nbytes = entry["nbytes"]
        if type(nbytes) is not int or not 0 <= nbytes <= MAX_DIM:
            raise DecodeError(f"tc.header.leaves[{i}].nbytes: expected an integer in [0, 2**62], got {nbytes!r:.80}")
        check_leaf_layout(dtype, shape, strides, nbytes, where)
        leaf = ReceivedLeaf(dtype, shape, strides, nbytes, entry)
        # Logical bytes, broadcast dims counted, bounded (why: docs/wire-format.md, section 7, check 4).
        logical = dtype.itemsize
        for size in shape:
            logical *= size
        total += logical
        if logical > leaf_cap or total > message_cap:
            check_logical_sizes(out + [leaf], bounds, DecodeError, lambda j: f"tc.header.leaves[{j}].shape")
        out.append(leaf)
    return out


@functools.cache
def _allowed_top_keys(transport_header_keys: frozenset) -> frozenset:
    return frozenset({VERSION_MEMBER, TRANSPORT_MEMBER, "leaves", "tree"}) | transport_header_keys


@functools.cache
def _allowed_leaf_keys(transport_leaf_keys: frozenset) -> frozenset:
    return frozenset({"dtype", "shape", "strides", "nbytes"}) | transport_leaf_keys


def _leaf_keys_error(entry: Any, allowed: frozenset, where: str):
    if type(entry) is not dict:
        raise DecodeError(f"{where}: expected an object, got {type(entry).__name__}")
    missing, unexpected = allowed - entry.keys(), entry.keys() - allowed
    raise DecodeError(
        f"{where}: expected keys {sorted(allowed)}, got"
        + (f" missing {sorted(missing)}" if missing else "")
        + (f" unexpected {some_keys(unexpected)}" if unexpected else "")
    )


def _int_list(value: Any, index: int, field: str) -> tuple[int, ...]:
    if type(value) is not list or len(value) > MAX_RANK:
        what = f"{len(value)} entries" if type(value) is list else type(value).__name__
        raise DecodeError(
            f"tc.header.leaves[{index}].{field}: expected a list of at most {MAX_RANK} integers, got {what}"
        )
    for v in value:
        if type(v) is not int or not 0 <= v <= MAX_DIM:
            raise DecodeError(f"tc.header.leaves[{index}].{field}: expected integers in [0, 2**62], got {v!r:.80}")
    return tuple(value)
