"""The receive side's counterpart of planning: a header text compiled once (`Compiled`) and the
caches of those by text (docs/repository.md, "Module-level state", says what `_cache` and `_tables`
keep and why). A message's data is still checked against its header every time, by the transport.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import lifetimes, limits
from .wire import header as wire_header
from .wire import kinds
from .wire.buffer import HOST_ALIGNMENT, UNITS
from .wire.structure import is_bare_tensor
from .wire.tree import compile_tree

__all__ = ["Compiled", "compile_header", "cached", "SMALL_NODES"]


@dataclass(slots=True, eq=False)  # eq=False: one per header, compared and hashed by identity
class Compiled:
    """One header, validated and compiled once (cached): what every message of it needs, and `view`, `restore`."""

    header: dict
    leaves: list[wire_header.ReceivedLeaf]
    build: Any  # (tensors, handed_out) -> the object
    prepared: Any  # the transport's `prepare` result
    nodes: int  # tree nodes plus leaves: what building the object costs, roughly
    handed_out_as: type | None  # the class of an object that is its one leaf (`_one_tensor_class`), else None
    transport: Any  # the transport the header names (transports.base.Transport)
    # Where `handed_out_as` is set and the transport views the messages where they lie
    # (Transport.in_place_layout): (value bytes, dtype, shape, strides, the class the viewed
    # tensor is set to or None for a plain one (wire.kinds.retypes_in_place), leaves, tree),
    # what `view` unpacks in one step; else None.
    in_place: tuple | None
    # describe's texts of this header's object, by (width, depth, max_chars): kept with the
    # header they describe, and forgotten with it.
    descriptions: dict[tuple[int, int, int], str] = field(default_factory=dict)

    def view(self, value: Any, name: str | None, view_of: Callable[[Any], torch.Tensor]) -> Any:
        """The object of one zero-copy message of this header (no copy, no device asked), viewed
        where dora put it and registered under `name` (an input id, for errors); None where
        `restore` must take it (docs/transports.md, "A stream's receives", says which and why each
        step counts). `view_of`: transports.arrow_values.view_of, passed in as the transport lookup
        is, so that this module stays below the transports. What the header fixed is unpacked
        from one tuple: with the caches cold, cheaper than reading its fields one by one."""
        layout = self.in_place
        if layout is None:
            return None
        total, dtype, shape, strides, retype, leaves, tree = layout
        width = UNITS.get(type(value), 0)  # the class gives the Arrow type (wire.buffer.check_value)
        if not width or len(value) * width != total or value.null_count:
            return None
        leaf = view_of(value)  # its storage keeps the Arrow buffer alive; it starts at the value's first byte
        if leaf.data_ptr() % HOST_ALIGNMENT:
            return None  # copied into aligned memory by `restore`
        if leaf.dtype is dtype:  # the value is typed as the leaf (tc.send)
            leaf.as_strided_(shape, strides)  # in bounds: the header was checked
            borrowed = value  # keep() copies the value itself
        else:
            # The bytes retyped (send_output_raw's UInt8, or the unit that tiles a dtype Arrow lacks):
            # a dtype view is no autograd view (no `_base`), so a released leaf keeps nothing of the
            # message alive; two torch calls, where a new tensor set onto the storage takes three.
            try:
                retyped = leaf.view(dtype)
            except RuntimeError:  # a view torch will not make: `restore` (leaf_views) instead
                return None
            borrowed, leaf = leaf, retyped.as_strided_(shape, strides)
        version = leaf._version  # read while plain: an Image's reads go through its __torch_function__
        if retype is not None:
            # The tensor itself becomes the Image (Video, Mask): no second tensor object over it
            # (wire.kinds.retypes_in_place, checked when the header was compiled).
            leaf.__class__ = retype
        lifetimes.register_leaf(name, leaf, version, borrowed, leaves, tree)
        return leaf

    def restore(self, value: Any, metadata: dict, copy: bool, device: torch.device | None, name: str | None) -> Any:
        """The object of one message of this header, its leaves materialized by the transport
        (checked against the header; views of `value`, or copies with `copy`, or on `device`),
        its object built, and registered under `name` where it borrows the message's memory.
        Any message comes here that `view` did not take (DecodeError naming what is wrong)."""
        materialized = self.transport.materialize(value, metadata, self.prepared, self.leaves, copy=copy, device=device)
        tensors = materialized.tensors
        handed_out: list | None
        if self.handed_out_as is torch.Tensor:  # one plain tensor: the object is the leaf, handed out as it is
            handed_out = tensors
            obj = tensors[0]
        else:
            # Leaves the message does not lend (copied: a small message's, most of them) are
            # tracked by nothing: each becomes its object (a BoundingBoxes) in place.
            handed_out = None if materialized.borrowed is None else []
            obj = self.build(tensors, handed_out)
        if materialized.borrowed is not None and handed_out is tensors and materialized.locations == [0]:
            # One plain tensor viewing its message from the start (a CUDA IPC stream's message).
            lifetimes.register_leaf(name, obj, obj._version, materialized.borrowed, self.leaves, self.header["tree"])
        elif materialized.borrowed is not None:
            assert handed_out is not None
            lifetimes.register_message(
                name,
                materialized.borrowed,
                handed_out,
                tensors,
                materialized.locations,
                self.leaves,
                self.header["tree"],
            )
        return obj


SMALL_NODES = 64  # a header this small builds its object in microseconds (codec.decode: no collector pause)


_CACHE_ENTRIES = 256
_CACHE_MAX_TEXT = 64 << 10
# Parsed and compiled, a header costs far more memory than its text (a closure per tree node), so
# only small trees are cached, and all cached trees together stay under a node budget.
_CACHE_MAX_NODES = 4096
_CACHE_NODE_BUDGET = 100_000
_cache_lock = threading.Lock()


class _Bounded(collections.OrderedDict):
    """key -> (value, cost), oldest first, at most `_CACHE_ENTRIES` entries and
    `_CACHE_NODE_BUDGET` of cost in all (`cost`). Hits read it without a lock; writes take it."""

    def __init__(self) -> None:
        super().__init__()
        self.cost = 0

    def keep(self, key: str, value: Any, cost: int, bounds: limits.Limits) -> None:
        with _cache_lock:
            if bounds is not limits.current():
                return  # the limits changed while it was validated: not kept under the new ones
            replaced = self.pop(key, None)  # another thread's, or one checked under older limits
            if replaced is not None:
                self.cost -= replaced[1]
            self[key] = (value, cost)
            self.cost += cost
            while self and (len(self) > _CACHE_ENTRIES or self.cost > _CACHE_NODE_BUDGET):
                _, (_, evicted) = self.popitem(last=False)
                self.cost -= evicted

    def forget(self) -> None:
        with _cache_lock:
            self.clear()
            self.cost = 0


_cache = _Bounded()  # header text -> (Compiled, tree nodes and leaves)
# header text before the tree -> ((the header without its tree, validated leaf table, the
# transport's prepared layout, the limits they were checked under, the transport), leaves)
_tables = _Bounded()
# A transport's name, from a header -> the transport, or a DecodeError naming an unknown one:
# always transports.transport_for_message (the caches hold what it returned), passed in by the
# callers only so that this module stays below the transports.
TransportLookup = Callable[[str], Any]


def cached(text: str) -> Compiled | None:
    """The compiled header if this text was seen (and kept) before, else None."""
    hit = _cache.get(text)
    return None if hit is None else hit[0]


def compile_header(text: str, lookup_transport: TransportLookup) -> Compiled:
    """Parse, validate and compile one header for the transport it names (cached)."""
    hit = _cache.get(text)
    if hit is not None:
        return hit[0]
    bounds = limits.current()
    table = _leaf_table(text, lookup_transport, bounds)
    if table is None:  # any other text: read whole, and every problem named
        header = wire_header.parse_header(text, bounds)
        header, leaves, prepared, transport = _validated(header, lookup_transport, bounds)
    else:
        header, leaves, prepared, transport = table
    build, nodes = compile_tree(header["tree"], leaves, bounds)
    cost = nodes + len(leaves)
    handed_out_as = _one_tensor_class(header["tree"])  # most streams: one plain tensor or Image
    layout = None if handed_out_as is None else transport.in_place_layout(prepared)
    # The class DLPack's tensor becomes in place (None: it is the object as it comes); a class
    # that cannot be set there takes the full path, which makes the object over the tensor.
    retype = None if handed_out_as is torch.Tensor else handed_out_as
    if retype is not None and not kinds.retypes_in_place(retype):
        layout = None
    in_place = None if layout is None else (*layout, retype, leaves, header["tree"])
    compiled = Compiled(header, leaves, build, prepared, cost, handed_out_as, transport, in_place)
    if len(text) <= _CACHE_MAX_TEXT and cost <= _CACHE_MAX_NODES:
        _cache.keep(text, compiled, cost, bounds)
    return compiled


def _validated(header: dict, lookup_transport: TransportLookup, bounds: limits.Limits) -> tuple:
    """A parsed header's envelope checked, its leaf table validated and prepared by the transport it names."""
    transport = lookup_transport(wire_header.read_envelope(header))
    leaves = wire_header.parse_leaves(header, transport.leaf_keys, transport.header_keys, bounds)
    return header, leaves, transport.prepare(header, leaves), transport


def _leaf_table(text: str, lookup_transport: TransportLookup, bounds: limits.Limits) -> tuple | None:
    """(header, validated leaf table, the transport's prepared layout, the transport) of a header
    written as the encoder writes one, within `_CACHE_MAX_TEXT`; None for any other text. All but
    the tree is read from the text before it (version and transport first, then the leaf table and
    the transport's keys, which `prepare` reads), so what was validated and prepared is kept by
    that text, under these limits. A member written again after the tree: the full parse refuses it."""
    split = wire_header.split_header(text, bounds) if len(text) <= _CACHE_MAX_TEXT else None
    if split is None:
        return None
    table_text, tree = split
    hit = _tables.get(table_text)
    if hit is None or hit[0][3] is not bounds:  # checked under other limits: checked again
        header = wire_header.parse_leaf_table(table_text, tree)
        if header is None:
            return None
        header, leaves, prepared, transport = _validated(header, lookup_transport, bounds)
        del header["tree"]
        hit = ((header, leaves, prepared, bounds, transport), len(leaves))
        _tables.keep(table_text, hit[0], len(leaves), bounds)
    rest, leaves, prepared, _, transport = hit[0]
    return {**rest, "tree": tree}, leaves, prepared, transport


def _one_tensor_class(tree: Any) -> type | None:
    """For a tree (compiled already, so valid) that is one bare tensor node
    (wire.structure.is_bare_tensor), the class its object is: torch.Tensor (the leaf itself:
    nothing to build) or an attribute-less TVTensor class (Image, Video, Mask). None for any other
    tree (`build` makes the object)."""
    if not is_bare_tensor(tree):
        return None
    if tree["t"] == "tensor":
        return torch.Tensor
    kind = kinds.kind_by_tag(tree["t"], "tc.header.tree")
    if kind is None or kind.attribute_names or kind.optional_attribute_names:
        return None
    return kind.cls


def forget_all() -> None:
    _cache.forget()
    _tables.forget()


limits.on_change(forget_all)  # a header accepted under other limits must be checked again
