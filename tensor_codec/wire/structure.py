"""The tree of a message (docs/wire-format.md, section 3): the container tags (a node's "t"), the
fields of a PackedSequence, how deep a structure may nest and the range of its integers. The
encoder's walk (walk.py) and the receiver's compiler (wire/tree.py) both read them here.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MAX_DEPTH",
    "INT64_MIN",
    "INT64_MAX",
    "DICT",
    "LIST",
    "TUPLE",
    "NAMEDTUPLE",
    "PACKED",
    "PACKED_FIELDS",
    "is_bare_tensor",
    "children_of",
]

MAX_DEPTH = 64  # nesting levels; also stops self-referencing structures
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Container tags: the tree's "t" of each container.
DICT, LIST, TUPLE, NAMEDTUPLE, PACKED = "dict", "list", "tuple", "namedtuple", "PackedSequence"
# A PackedSequence node's tensor fields, in torch's order (the namedtuple's own field order).
PACKED_FIELDS = ("data", "batch_sizes", "sorted_indices", "unsorted_indices")


def is_bare_tensor(tree: object) -> bool:
    """Whether a tree is one tensor node holding nothing but its tag and its leaf: no `grad`, no
    class attributes (a plain tensor, or an Image, Video or Mask). A stream of these is what the
    sender repeats and the receiver views in one step. (Leaves are numbered in order and used
    once, so such a tree's leaf is the message's only one.)"""
    return type(tree) is dict and len(tree) == 2 and "leaf" in tree


def children_of(node: dict) -> list[tuple[Any, Any]]:
    """(key, child) of each child of a well-formed tree node, keyed as the sender's walk keys
    them (dict keys, list/tuple indices, namedtuple and PackedSequence field names); none for a
    tensor or a float node."""
    tag = node.get("t")
    if tag == DICT:
        return [(key, child) for key, child in node["items"]]
    if tag == LIST or tag == TUPLE:
        return list(enumerate(node["items"]))
    if tag == NAMEDTUPLE:
        return list(zip(node["fields"], node["items"]))
    if tag == PACKED:
        return [(field, node[field]) for field in PACKED_FIELDS]
    return []
