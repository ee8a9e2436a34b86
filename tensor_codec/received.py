"""The receive side's counterpart of planning: a header text compiled once into everything a
message of that header needs (validated leaf table, tree builder, the transport's prepared
layout), and a cache of those.

A stream repeats the same header for every message of the same shape. Validation is a pure
function of the header text and the transport, so its result is cached by exactly those (the
data checks against the buffer still run for every message, in the transport). Bounded in
entries and text size; a change of limits empties it.
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
    header, leaves = wire.parse_header(text, transport.leaf_keys, transport.header_keys, bounds)
    build, nodes = compile_tree(header["tree"], leaves, bounds)
    cost = nodes + len(leaves)
    plain = header["tree"] == _PLAIN_TREE  # what most streams send: one plain tensor
    compiled = Compiled(header, leaves, build, transport.prepare(header, leaves), cost, plain)
    if len(text) <= _CACHE_MAX_TEXT and cost <= _CACHE_MAX_NODES:
        _remember(key, compiled, cost, bounds)
    return compiled


def cached_headers() -> int:
    """How many compiled headers the cache holds (tests)."""
    return len(_cache)


def cached_nodes() -> int:
    """The tree nodes all cached headers hold together (tests: the node budget)."""
    return _cache_nodes


def forget_all() -> None:
    global _cache_nodes
    with _cache_lock:
        _cache.clear()
        _cache_nodes = 0


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
