"""The receive side's counterpart of planning: a header text compiled once into everything a
message of that header needs (validated leaf table, tree builder, the transport's prepared
layout), and a cache of those.

A stream repeats the same header for every message of the same shape. Validation is a pure
function of the header text and the transport, so its result is cached by exactly those (the
data checks against the buffer still run for every message, in the transport). Bounded in
entries and text size; a change of limits empties it.

A stream whose tree changes while its layout stays (a new canvas size, a new timestamp in a dict,
every frame) sends a new header each time with the same leaf table. The leaf table, validated and
prepared by the transport, is kept too, by the text before the tree (wire.split_header): such a
header costs the parse and compile of its tree alone.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, NamedTuple

from . import limits, wire
from .tree import compile_tree

__all__ = ["Compiled", "compile_header", "cached", "SMALL_NODES"]


class Compiled(NamedTuple):
    header: dict
    leaves: list[wire.ReceivedLeaf]
    build: Any  # (tensors, handed_out) -> the object
    prepared: Any  # the transport's `prepare` result
    nodes: int  # tree nodes plus leaves: what building the object costs, roughly
    plain: bool  # the object is the one leaf itself (a plain tensor, no grad): nothing to build


SMALL_NODES = 64  # a header this small builds its object in microseconds (see codec.decode)
_PLAIN_TREE = {"t": "tensor", "leaf": 0}


_CACHE_ENTRIES = 256
_CACHE_MAX_TEXT = 64 << 10
# Parsed and compiled, a header costs far more memory than its text (a closure per tree node), so
# only small trees are cached, and all cached trees together stay under a node budget.
_CACHE_MAX_NODES = 4096
_CACHE_NODE_BUDGET = 100_000
_cache: collections.OrderedDict = collections.OrderedDict()  # (transport, text) -> (Compiled, cost)
_cache_nodes = 0
_cache_lock = threading.Lock()
# (transport, header text before the tree) -> (the header without its tree, validated leaf table,
# the transport's prepared layout, the limits they were checked under). Bounded like the headers:
# entries, and leaves in all.
_tables: collections.OrderedDict = collections.OrderedDict()
_table_leaves = 0


def cached(text: str, transport_name: str) -> Compiled | None:
    """The compiled header if this text was seen (and kept) before, else None."""
    hit = _cache.get((transport_name, text))
    return None if hit is None else hit[0]


def compile_header(text: str, transport_name: str, transport: Any) -> Compiled:
    """Parse, validate and compile one header for `transport` (cached)."""
    key = (transport_name, text)
    hit = _cache.get(key)
    if hit is not None:
        return hit[0]
    bounds = limits.current()
    table = None
    if len(text) <= _CACHE_MAX_TEXT:
        table = _leaf_table(text, transport_name, transport, bounds)
    if table is None:  # any other text: read whole, and every problem named
        header, leaves = wire.parse_header(text, transport.leaf_keys, transport.header_keys, bounds)
        prepared = transport.prepare(header, leaves)
    else:
        header, leaves, prepared = table
    build, nodes = compile_tree(header["tree"], leaves, bounds)
    cost = nodes + len(leaves)
    plain = header["tree"] == _PLAIN_TREE  # what most streams send: one plain tensor
    compiled = Compiled(header, leaves, build, prepared, cost, plain)
    if len(text) <= _CACHE_MAX_TEXT and cost <= _CACHE_MAX_NODES:
        _remember(key, compiled, cost, bounds)
    return compiled


def _leaf_table(text: str, transport_name: str, transport: Any, bounds: limits.Limits) -> tuple | None:
    """(header, validated leaf table, the transport's prepared layout) of a header written as
    the encoder writes one, what comes before its tree taken from the cache when its text was
    seen under these limits; None for any other text. `prepare` reads the leaf table and the
    transport's keys, all of them before the tree: it is kept with them."""
    split = wire.split_header(text, bounds)
    if split is None:
        return None
    table_text, tree = split
    key = (transport_name, table_text)
    hit = _tables.get(key)
    if hit is None or hit[3] is not bounds:  # checked under other limits: checked again
        parsed = wire.parse_leaf_table(table_text, tree, transport.leaf_keys, transport.header_keys, bounds)
        if parsed is None:
            return None
        header, leaves = parsed
        prepared = transport.prepare(header, leaves)
        del header["tree"]
        hit = (header, leaves, prepared, bounds)
        _remember_table(key, hit, bounds)
    rest, leaves, prepared, _ = hit
    return {**rest, "tree": tree}, leaves, prepared


def cached_headers() -> int:
    """How many compiled headers the cache holds (tests)."""
    return len(_cache)


def cached_nodes() -> int:
    """The tree nodes all cached headers hold together (tests: the node budget)."""
    return _cache_nodes


def forget_all() -> None:
    global _cache_nodes, _table_leaves
    with _cache_lock:
        _cache.clear()
        _cache_nodes = 0
        _tables.clear()
        _table_leaves = 0


limits.on_change(forget_all)  # a header accepted under other limits must be checked again


def _remember(key: tuple, compiled: Compiled, cost: int, bounds: limits.Limits) -> None:
    global _cache_nodes
    with _cache_lock:  # misses only; hits read the dict without it
        if key in _cache or bounds is not limits.current():
            return  # the limits changed while it was validated: not kept under the new ones
        _cache[key] = (compiled, cost)
        _cache_nodes += cost
        while _cache and (len(_cache) > _CACHE_ENTRIES or _cache_nodes > _CACHE_NODE_BUDGET):
            _, (_, evicted) = _cache.popitem(last=False)
            _cache_nodes -= evicted


def _remember_table(key: tuple, table: tuple, bounds: limits.Limits) -> None:
    global _table_leaves
    with _cache_lock:
        if bounds is not limits.current():
            return  # the limits changed while it was validated: not kept under the new ones
        replaced = _tables.pop(key, None)  # another thread's, or one checked under older limits
        if replaced is not None:
            _table_leaves -= len(replaced[1])
        _tables[key] = table
        _table_leaves += len(table[1])
        while _tables and (len(_tables) > _CACHE_ENTRIES or _table_leaves > _CACHE_NODE_BUDGET):
            _, (_, evicted, _, _) = _tables.popitem(last=False)
            _table_leaves -= len(evicted)
