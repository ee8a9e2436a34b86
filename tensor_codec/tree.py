"""The structure around the tensors, on the sender's side: flatten an object into its tree (the
format: wire/tree.py, which also compiles a received one) plus a list of tensors, and map a
function over the tensors of a structure keeping every type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.utils.rnn import PackedSequence

from . import walk
from .wire.kinds import TensorKind
from .wire.structure import DICT, LIST, NAMEDTUPLE, PACKED, PACKED_FIELDS, TUPLE, children_of
from .wire.tree import NAMEDTUPLES, namedtuple_name

__all__ = [
    "flatten",
    "tensor_node",
    "map_tensors",
    "iter_leaves",
    "leaf_paths",
]


def flatten(obj: Any) -> tuple[Any, list[tuple[torch.Tensor, tuple]]]:
    """-> (tree as JSON-able data, [(plain tensor, path parts), ...] in depth-first order)."""
    leaves: list[tuple[torch.Tensor, tuple]] = []

    def on_tensor(x: torch.Tensor, kind: TensorKind, path: tuple) -> dict:
        plain = walk.plain_of(x)
        leaves.append((plain, path))
        return tensor_node(kind, x, plain, len(leaves) - 1)

    return walk.fold(obj, on_tensor, _encode_scalar, _encode_container), leaves


def _encode_scalar(x: Any, path: tuple) -> Any:
    if type(x) is float and not math.isfinite(x):
        return {"t": "float", "v": "nan" if x != x else ("inf" if x > 0 else "-inf")}
    return x


def _encode_container(x: Any, tag: str, values: list, path: tuple) -> dict:
    if tag is DICT or tag is LIST or tag is TUPLE:
        return {"t": tag, "items": values}  # a dict's: [key, node] pairs
    if tag is NAMEDTUPLE:
        tx = type(x)
        name = next((name for name, cls in NAMEDTUPLES.items() if cls is tx), namedtuple_name(tx))
        return {"t": tag, "name": name, "fields": list(tx._fields), "items": values}
    return {"t": tag, **dict(zip(PACKED_FIELDS, values))}  # PackedSequence


def leaf_paths(tree: Any) -> list[tuple]:
    """Path parts of each leaf of a tree that `compile_tree` accepted, in leaf order (for messages):
    `flatten`'s walk read back from the tree it wrote, so a leaf's path here is the path
    `walk.fold` gave it on the sender."""
    paths: list[tuple] = []
    todo: list[tuple[Any, tuple]] = [(tree, ())]  # depth first: children pushed in reverse
    while todo:
        node, path = todo.pop()
        if type(node) is not dict:
            continue
        if "leaf" in node:
            paths.append(path)
        else:
            todo.extend((child, path + (key,)) for key, child in reversed(children_of(node)))
    return paths


def tensor_node(kind: TensorKind, x: torch.Tensor, plain: torch.Tensor, index: int) -> dict:
    """The tree node of tensor `x` (`plain`: the same as a plain tensor), leaf number `index`."""
    node = {"t": kind.tag, "leaf": index}
    if kind.attribute_names:  # plain tensors, Image, Video and Mask have none
        node.update(kind.attributes(x))
    if plain.requires_grad:
        node["grad"] = True
    return node


def map_tensors(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], obj: Any) -> Any:
    """Rebuild `obj` with every tensor replaced by ``fn(plain, original)`` (`original` as found,
    maybe a TVTensor; `plain` it as a plain tensor), rewrapped like the original: container types,
    TVTensor classes and attributes all survive, which ``Tensor.pin_memory()``, ``.to()`` or a
    DataLoader's pinning step do not guarantee (docs/api.md, failure 3)."""

    def on_tensor(x: torch.Tensor, kind: TensorKind, path: tuple) -> torch.Tensor:
        return kind.wrap_like(fn(walk.plain_of(x), x), x)

    return walk.fold(obj, on_tensor, None, _rebuild)


def _rebuild(x: Any, tag: str, values: list, path: tuple) -> Any:
    if tag is LIST:
        return values
    if tag is TUPLE:
        return tuple(values)
    if tag is DICT:
        return dict(values)
    if tag is PACKED:  # tuple.__new__: keeps the fields as they are (the constructor recomputes)
        return tuple.__new__(PackedSequence, tuple(values))
    return type(x)(*values)  # a namedtuple


def iter_leaves(obj: Any):
    """Yield ``(path, leaf)`` for every leaf of a supported structure in the order `encode`
    numbers them (`path` as walk.fold gives it): tensors as found (TVTensors stay TVTensors), and
    the scalars. The whole structure is checked before the first leaf comes out."""
    found: list = []
    walk.fold(obj, lambda x, kind, path: found.append((path, x)), lambda x, path: found.append((path, x)))
    yield from found
