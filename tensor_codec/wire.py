"""Wire format v1: the metadata keys, the JSON header, and the checks every receiver runs.

A message is an Arrow value plus flat metadata. The codec's metadata keys all start with ``tc.``
so a caller's own keys (and dora's ``timestamp``) sit beside them:

* ``tc.version``   int, the format version (1);
* ``tc.transport`` str, which transport laid out the bytes (``"host"``; later ``"cuda-ipc"``);
* ``tc.header``    str, compact JSON: ``{"leaves": [...], "tree": ...}`` plus transport fields.

Each leaf entry holds ``dtype``, ``shape``, ``strides`` (elements), ``nbytes`` and the transport's
own location fields (host: ``offset``). Everything is validated here before a single data byte
is interpreted: the header's cost (limits.py: bytes, items and string bytes, counted before it is
parsed), strict JSON, version, sizes, types, a dtype whitelist, layouts whose every element lies
inside the leaf's bytes, logical sizes within limits. The full specification is
docs/wire-format.md.
"""

from __future__ import annotations

import collections
import functools
import json
import threading
from dataclasses import dataclass
from typing import Any

import torch

from . import header_json, limits
from .dtypes import WireDType, by_name
from .errors import DecodeError, EncodeError, Where, format_path
from .layout import MAX_DIM, MAX_RANK, LeafLayout, check_leaf_layout, plan_leaf
from .kinds import kind_of
from .tree import compile_tree, flatten, tensor_node

__all__ = [
    "VERSION",
    "KEY_VERSION",
    "KEY_TRANSPORT",
    "KEY_HEADER",
    "RESERVED_PREFIX",
    "Plan",
    "ReceivedLeaf",
    "make_plan",
    "header_metadata",
    "read_metadata",
    "parse_header",
    "parse_leaves",
]

VERSION = 1
RESERVED_PREFIX = "tc."
KEY_VERSION = "tc.version"
KEY_TRANSPORT = "tc.transport"
KEY_HEADER = "tc.header"

_COMMON_LEAF_KEYS = ("dtype", "shape", "strides", "nbytes")
# Compact, strict JSON (no NaN/Infinity tokens: the tree encodes non-finite floats itself).
# check_circular=False: the codec builds the tree itself and it cannot contain cycles.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False)


@dataclass
class Plan:
    """An object taken apart, nothing copied yet: the tree and each tensor's wire layout.

    `memo` is set when the plan comes from the plan cache: a dict, shared by every plan of the same
    layout, where a transport keeps what it derives from the plan (its metadata), by transport name.
    """

    tree: Any
    leaves: list[LeafLayout]
    paths: list[tuple]
    memo: dict | None = None

    @property
    def data_bytes(self) -> int:
        return sum(leaf.nbytes for leaf in self.leaves)

    @property
    def has_cuda(self) -> bool:
        """Whether any tensor of the message lives on a GPU (what CUDA IPC could share)."""
        return any(leaf.source.is_cuda for leaf in self.leaves)


# Streams send the same layout again and again; most big messages are one tensor or TVTensor.
# For those the plan is cached by a signature of everything it depends on.
_PLAN_CACHE_ENTRIES = 256
_plan_cache: collections.OrderedDict = collections.OrderedDict()


def make_plan(obj: Any) -> Plan:
    kind = kind_of(obj)
    plain = None
    if kind is not None:
        plain = obj if type(obj) is torch.Tensor else obj.as_subclass(torch.Tensor)
    # Only dense CPU or CUDA tensors take the cached path; anything else (sparse, nested, meta,
    # quantized, other devices) takes the general path and its errors.
    if plain is not None and plain.layout is torch.strided and (plain.is_cpu or plain.is_cuda) and not (
        plain.is_nested or plain.is_quantized
    ):
        signature = (
            kind.tag, plain.dtype, plain.shape, plain.stride(), plain.device.type,
            plain.requires_grad, plain.is_conj(), plain.is_neg(), kind.attribute_key(obj),
        )
        cached = _plan_cache.get(signature)
        if cached is not None:
            tree, template, memo = cached
            return Plan(tree, [template.with_source(plain)], [()], memo)
        leaf = plan_leaf(plain, ())
        _check_logical_sizes([leaf], limits.current(), EncodeError, lambda i: "tensor at `$`")
        tree, memo = tensor_node(kind, obj, plain, 0), {}
        _plan_cache[signature] = (tree, LeafLayout(leaf.dtype, leaf.shape, leaf.strides, leaf.nbytes, None, leaf.raw_span, leaf.broadcast), memo)
        if len(_plan_cache) > _PLAN_CACHE_ENTRIES:
            _plan_cache.popitem(last=False)
        return Plan(tree, [leaf], [()], memo)
    return _make_plan(obj)


limits.on_change(_plan_cache.clear)  # plans were checked against the limits they were made under


def _make_plan(obj: Any) -> Plan:
    tree, found = flatten(obj)
    bounds = limits.current()
    if len(found) > bounds.leaves:
        raise EncodeError(
            f"too many tensors at `$`: expected at most {bounds.leaves} per message (limits.leaves), got {len(found)}"
        )
    leaves = [plan_leaf(tensor, path) for tensor, path in found]
    _check_logical_sizes(leaves, bounds, EncodeError, lambda i: f"tensor at `{format_path(found[i][1])}`")
    return Plan(tree, leaves, [path for _, path in found])


def _check_logical_sizes(leaves: list, bounds: limits.Limits, error: type, name) -> None:
    """Each tensor's and the message's logical bytes (numel x item size, broadcast dims counted:
    what a consumer that densifies it allocates) within the limits. `leaves` have .shape and
    .dtype; `name(i)` names leaf i in the error."""
    total = 0
    for i, leaf in enumerate(leaves):
        logical = leaf.dtype.itemsize
        for size in leaf.shape:
            logical *= size
        if logical > bounds.leaf_logical_bytes:
            raise error(
                f"{name(i)}: expected at most {bounds.leaf_logical_bytes} logical bytes per tensor "
                f"(limits.leaf_logical_bytes; numel x item size), got {logical}"
            )
        total += logical
        if total > bounds.message_logical_bytes:
            raise error(
                f"{name(i)}: expected at most {bounds.message_logical_bytes} logical bytes per message "
                f"(limits.message_logical_bytes), got {total} up to this tensor"
            )


def header_metadata(plan: Plan, transport: str, leaf_fields: list[dict], extra: dict | None = None) -> dict:
    """The codec's metadata for a planned message; `leaf_fields` are the transport's per-leaf keys."""
    leaves = []
    for leaf, fields in zip(plan.leaves, leaf_fields):
        entry = {"dtype": leaf.dtype.name, "shape": list(leaf.shape), "strides": list(leaf.strides), "nbytes": leaf.nbytes}
        entry.update(fields)
        leaves.append(entry)
    header = {"leaves": leaves, "tree": plan.tree}
    if extra:
        header.update(extra)
    text = _JSON.encode(header)
    header_json.check_outgoing(text, limits.current())
    return {KEY_VERSION: VERSION, KEY_TRANSPORT: transport, KEY_HEADER: text}


# --------------------------------------------------------------------------------------------
# Receiving


@dataclass(slots=True)
class ReceivedLeaf:
    dtype: WireDType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    nbytes: int
    fields: dict  # the raw leaf entry; the transport reads and validates its own keys from it


def read_metadata(metadata: Any) -> tuple[str, str]:
    """Check the codec's metadata keys. -> (transport name, header JSON text)."""
    if not isinstance(metadata, dict):
        raise DecodeError(f"metadata: expected a dict, got {type(metadata).__name__}")
    version = metadata.get(KEY_VERSION)
    if version is None:
        raise DecodeError(
            f"metadata: expected key {KEY_VERSION!r:.80} (not a tensor_codec message?), got keys {sorted(map(str, metadata))[:8]}"
        )
    if type(version) is not int or version != VERSION:
        raise DecodeError(f"{KEY_VERSION}: expected {VERSION}, got {version!r:.80}")
    transport = metadata.get(KEY_TRANSPORT)
    if type(transport) is not str:
        raise DecodeError(f"{KEY_TRANSPORT}: expected a transport name string, got {transport!r:.80}")
    text = metadata.get(KEY_HEADER)
    if type(text) is not str:
        raise DecodeError(f"{KEY_HEADER}: expected a JSON string, got {type(text).__name__}")
    return transport, text


# A stream repeats the same header for every message of the same shape. Validation is a pure
# function of the header text and the transport, so its result is cached by exactly those (the
# data checks against the buffer still run for every message). Bounded in entries and text size.
_CACHE_ENTRIES = 256
_CACHE_MAX_TEXT = 64 << 10
# Parsed and compiled, a header costs far more memory than its text (a closure per tree node), so
# only small trees are cached, and all cached trees together stay under a node budget.
_CACHE_MAX_NODES = 4096
_CACHE_NODE_BUDGET = 100_000
_header_cache: collections.OrderedDict = collections.OrderedDict()
_cache_nodes = 0
_cache_lock = threading.Lock()


def parse_header(text: str, transport_name: str, transport: Any) -> tuple[dict, list[ReceivedLeaf], Any, Any]:
    """Parse and validate the header text.

    -> (header object, validated leaf table, tree builder, the transport's prepared layout).
    """
    key = (transport_name, text)
    hit = _header_cache.get(key)
    if hit is not None:
        return hit[:4]
    bounds = limits.current()
    header_json.check_received(text, bounds)  # before parsing: refusing costs one pass in C
    header = header_json.parse(text)
    if type(header) is not dict:
        raise DecodeError(f"{KEY_HEADER}: expected a JSON object, got {type(header).__name__}")
    leaves = parse_leaves(header, transport.leaf_keys, transport.header_keys, bounds)
    build, nodes = compile_tree(header["tree"], leaves, bounds)
    entry = (header, leaves, build, transport.prepare(header, leaves))
    if len(text) <= _CACHE_MAX_TEXT and nodes + len(leaves) <= _CACHE_MAX_NODES:
        _remember(key, entry, nodes + len(leaves), bounds)
    return entry


def _forget_all() -> None:
    global _cache_nodes
    with _cache_lock:
        _header_cache.clear()
        _cache_nodes = 0


limits.on_change(_forget_all)  # a header accepted under other limits must be checked again


def _remember(key: tuple, entry: tuple, cost: int, bounds: limits.Limits) -> None:
    global _cache_nodes
    with _cache_lock:  # misses only; hits read the dict without it
        if key in _header_cache or bounds is not limits.current():
            return  # the limits changed while it was validated: not kept under the new ones
        _header_cache[key] = entry + (cost,)
        _cache_nodes += cost
        while _header_cache and (len(_header_cache) > _CACHE_ENTRIES or _cache_nodes > _CACHE_NODE_BUDGET):
            _, evicted = _header_cache.popitem(last=False)
            _cache_nodes -= evicted[-1]


def parse_leaves(
    header: dict, transport_leaf_keys: frozenset, transport_header_keys: frozenset, bounds: limits.Limits | None = None
) -> list[ReceivedLeaf]:
    """Validate the leaf table (and the header's top-level keys) without touching any data."""
    bounds = bounds or limits.current()
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
    out = []
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
        # A 4-byte message may describe a stride-0 tensor of 2**62 logical bytes: bounded here so
        # that no consumer that densifies what it got (a checksum, .contiguous(), a copy) can be
        # made to allocate more than the limits from a few bytes.
        logical = dtype.itemsize
        for size in shape:
            logical *= size
        total += logical
        if logical > leaf_cap or total > message_cap:
            candidate = out + [ReceivedLeaf(dtype, shape, strides, nbytes, entry)]
            _check_logical_sizes(candidate, bounds, DecodeError, lambda j: f"tc.header.leaves[{j}].shape")
        # `entry` itself carries the transport's keys (validated by the transport).
        out.append(ReceivedLeaf(dtype, shape, strides, nbytes, entry))
    return out


@functools.lru_cache(maxsize=None)
def _allowed_top_keys(transport_header_keys: frozenset) -> frozenset:
    return frozenset({"leaves", "tree"}) | transport_header_keys


@functools.lru_cache(maxsize=None)
def _allowed_leaf_keys(transport_leaf_keys: frozenset) -> frozenset:
    return frozenset(_COMMON_LEAF_KEYS) | transport_leaf_keys


def _leaf_keys_error(entry: Any, allowed: frozenset, where: str):
    if type(entry) is not dict:
        raise DecodeError(f"{where}: expected an object, got {type(entry).__name__}")
    missing, unexpected = allowed - entry.keys(), entry.keys() - allowed
    raise DecodeError(
        f"{where}: expected keys {sorted(allowed)}, got"
        + (f" missing {sorted(missing)}" if missing else "")
        + (f" unexpected {[name[:40] for name in sorted(unexpected)[:8]]}" if unexpected else "")
    )


def _int_list(value: Any, index: int, field: str) -> tuple[int, ...]:
    if type(value) is not list or len(value) > MAX_RANK:
        what = f"{len(value)} entries" if type(value) is list else type(value).__name__
        raise DecodeError(f"tc.header.leaves[{index}].{field}: expected a list of at most {MAX_RANK} integers, got {what}")
    for v in value:
        if type(v) is not int or not 0 <= v <= MAX_DIM:
            raise DecodeError(f"tc.header.leaves[{index}].{field}: expected integers in [0, 2**62], got {v!r:.80}")
    return tuple(value)
