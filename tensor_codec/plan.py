"""Planning, where the send path starts (send_pipeline.py): an object taken apart into a tree and
its tensors' wire layouts, nothing copied yet. Streams send the same layout again and again, and
most big messages are one tensor or TVTensor: their plans are cached (`_plans`), and the
transports keep what they derive from one in its memo (`Plan`).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from . import limits
from .errors import EncodeError, format_path
from .layout import LeafLayout, plan_leaf, values_of
from .tree import flatten, tensor_node
from .walk import plain_of
from .wire.kinds import kind_of
from .wire.limits import check_logical_sizes

__all__ = ["Plan", "make_plan"]


@dataclass(slots=True)
class Plan:
    """An object taken apart, nothing copied yet: the tree and each tensor's wire layout."""

    tree: Any
    leaves: list[LeafLayout]
    paths: Sequence[tuple]
    # Set on a plan from the plan cache: shared by every plan of the same tree and layout, where a
    # transport keeps what it derives from the plan (its metadata), under its own key.
    memo: dict | None = None
    has_cuda: bool = False  # whether any tensor is `on_gpu`
    # Likewise, shared by every plan of the same layout whatever its tree (its attributes): what a
    # transport derives from the leaves alone (their part of the header).
    layout_memo: dict | None = None

    @property
    def data_bytes(self) -> int:
        return sum(leaf.nbytes for leaf in self.leaves)


def on_gpu(t: torch.Tensor) -> bool:
    """Whether a tensor's bytes are on a GPU (what CUDA IPC could share; the tests' stand-in replaces it)."""
    return t.is_cuda


_PLAN_CACHE_ENTRIES = 512
# The plans of single tensors, two levels in one table, oldest first (docs/repository.md's row says
# by what; make_plan builds the keys). A layout key starts with a dtype, a plan key with a tuple:
# the two never meet. A stream whose attributes change (a new canvas size every frame) still reuses
# the layout (laid out again once its own new plans have pushed it out).
_plans: collections.OrderedDict = collections.OrderedDict()
_ROOT_PATHS = ((),)


def _remember(key: Any, entry: Any) -> None:
    _plans[key] = entry
    if len(_plans) > _PLAN_CACHE_ENTRIES:
        _plans.popitem(last=False)


def make_plan(obj: Any) -> Plan:
    kind = kind_of(obj)
    plain = None if kind is None else plain_of(obj)
    # Only dense CPU or CUDA tensors take the cached path; anything else (sparse, nested, meta,
    # quantized, other devices) takes the general path and its errors.
    if (
        kind is not None
        and plain is not None
        and plain.layout is torch.strided
        and (plain.is_cpu or plain.is_cuda)
        and not (plain.is_nested or plain.is_quantized)
    ):
        # is_cuda, not device.type (a new torch.device each call): only CPU and CUDA get here.
        layout_key = (
            plain.dtype,
            plain.shape,
            plain.stride(),
            plain.is_cuda,
            plain.requires_grad,
            plain.is_conj(),
            plain.is_neg(),
        )
        plan_key = (layout_key, kind.tag, kind.attribute_key(obj))
        cached = _plans.get(plan_key)
        leaf = None
        if cached is None:
            cached, leaf = _new_plan_entry(kind, obj, plain, layout_key)
            _remember(plan_key, cached)
        tree, template, memo, layout_memo = cached
        if leaf is None:  # else a new layout's first tensor, planned in full just now
            # The key holds requires_grad, conj and neg: with none set, nothing is to resolve.
            resolved = values_of(plain, ()) if layout_key[4] or layout_key[5] or layout_key[6] else plain
            leaf = template.with_plain_source(resolved)
        return Plan(tree, [leaf], _ROOT_PATHS, memo, on_gpu(plain), layout_memo)
    return _make_plan(obj)


def _new_plan_entry(kind: Any, obj: Any, plain: torch.Tensor, layout_key: tuple) -> tuple[tuple, Any]:
    """-> ((tree, layout template, memo, layout memo) for the plan cache, the tensor's leaf when
    its layout was new and planned in full here, else None: the layout comes from the table
    when a plan of another tree (other attributes) had it)."""
    leaf = None
    layout = _plans.get(layout_key)
    if layout is None:
        leaf = plan_leaf(plain, ())
        check_logical_sizes([leaf], limits.current(), EncodeError, lambda i: "tensor at `$`")
        template = LeafLayout(leaf.dtype, leaf.shape, leaf.strides, leaf.nbytes, None, leaf.raw_span, leaf.broadcast)
        layout = (template, {})
        _remember(layout_key, layout)
    return (tensor_node(kind, obj, plain, 0), layout[0], {}, layout[1]), leaf


limits.on_change(_plans.clear)  # plans were checked against the limits they were made under


def _make_plan(obj: Any) -> Plan:
    tree, found = flatten(obj)
    bounds = limits.current()
    if len(found) > bounds.leaves:
        raise EncodeError(
            f"too many tensors at `$`: expected at most {bounds.leaves} per message (limits.leaves), got {len(found)}"
        )
    leaves = [plan_leaf(tensor, path) for tensor, path in found]
    check_logical_sizes(leaves, bounds, EncodeError, lambda i: f"tensor at `{format_path(found[i][1])}`")
    has_cuda = any(leaf.source is not None and on_gpu(leaf.source) for leaf in leaves)
    return Plan(tree, leaves, [path for _, path in found], None, has_cuda)
