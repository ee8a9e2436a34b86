"""The one walker over the nested structures the codec supports, and the one rule for them.

Everything that goes through a structure of the sender's kind (encoding it, mapping a function
over its tensors, listing its leaves, the nodes' content digest, the tests' strict comparison)
goes through `fold`, so they all accept the same objects, visit them in the same order, name
places the same way (``("boxes", 2)``, rendered ``$.boxes[2]``) and stop at the same depth.

The rule is what `encode` accepts (docs/api.md, "What encode and send take"; `SUPPORTED`), its
children in the order docs/wire-format.md, section 3, numbers leaves. The walk of a *received*
tree (wire/tree.py) is separate: it reads hostile JSON, not Python objects, and checks far more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from torch.nn.utils.rnn import PackedSequence

from .errors import EncodeError, format_path
from .wire.kinds import PLAIN, TensorKind, kind_of
from .wire.structure import DICT, INT64_MAX, INT64_MIN, LIST, MAX_DEPTH, NAMEDTUPLE, PACKED, TUPLE

__all__ = [
    "SUPPORTED",
    "fold",
    "plain_of",
]


SUPPORTED = (
    "a torch.Tensor, a TVTensor (Image, Video, Mask, BoundingBoxes, KeyPoints), a PackedSequence, "
    "dict, list, tuple, namedtuple, int, float, bool, str or None"
)


_SCALAR, _INT = object(), object()  # leaves other than tensors; int has a range to check

# Exact type -> what it is: a TensorKind, _SCALAR, _INT or a container tag. Built here, never
# written: a TVTensor's kind is kinds.kind_of's (its one table of kinds), a namedtuple class is
# told by its fields (`_other`). A dict, not a read-only view: `fold` reads it for every node.
_TYPES: dict[type, Any] = {
    type(None): _SCALAR,
    bool: _SCALAR,
    float: _SCALAR,
    str: _SCALAR,
    int: _INT,
    dict: DICT,
    list: LIST,
    tuple: TUPLE,
    PackedSequence: PACKED,
    torch.Tensor: PLAIN,
}


def plain_of(x: torch.Tensor) -> torch.Tensor:
    """`x` as a plain tensor, an alias (a TVTensor's property reads go through the slow ``__torch_function__``)."""
    return x if type(x) is torch.Tensor else x.as_subclass(torch.Tensor)


def _other(x: Any, path: tuple) -> Any:
    """What a type outside `_TYPES` is: a TVTensor class, a namedtuple, or refused."""
    kind = kind_of(x)
    if kind is not None:
        return kind
    tx = type(x)
    if issubclass(tx, tuple) and hasattr(tx, "_fields"):
        return NAMEDTUPLE
    what = f"{tx.__module__}.{tx.__qualname__}"
    hint = ""
    if isinstance(x, torch.Tensor):
        hint = " (a tensor subclass; convert with .as_subclass(torch.Tensor) or use a TVTensor)"
    elif tx.__module__ == "numpy":
        hint = " (convert numpy values with torch.from_numpy(...) or .item())"
    raise EncodeError(f"unsupported type at `{format_path(path)}`: expected {SUPPORTED}, got {what}{hint}")


def fold(
    obj: Any,
    on_tensor: Callable[[torch.Tensor, TensorKind, tuple], Any] | None = None,
    on_scalar: Callable[[Any, tuple], Any] | None = None,
    on_container: Callable[[Any, str, list, tuple], Any] | None = None,
    on_enter: Callable[[Any, str, tuple], None] | None = None,
) -> Any:
    """Walk `obj` depth first by the rule above; -> what `on_container` (or a leaf hook) made of
    the root. Raises EncodeError naming the path of the first node outside the rule.

    Each hook is optional: a leaf without its hook stands for itself (a tensor as found; a scalar
    is None, bool, int, float or str), a container without `on_container` gives None. `on_enter`
    sees a container before its children, `on_container` after them, with `values`: what the
    walk made of each child, in order (for a dict ``[key, value]`` pairs, as the wire tree has
    them). `tag` is DICT, LIST, TUPLE, NAMEDTUPLE or PACKED; `path` the dict keys, list/tuple
    indices and namedtuple or PackedSequence field names from the root.
    """
    # Locals of the closure: read faster than module globals on every node.
    types, scalar, integer, max_depth = _TYPES, _SCALAR, _INT, MAX_DEPTH
    lo, hi = INT64_MIN, INT64_MAX

    def node(x: Any, path: tuple, depth: int) -> Any:
        if depth > max_depth:
            raise EncodeError(
                f"structure too deep at `{format_path(path)}`: expected at most {max_depth} levels "
                "(is it self-referencing?)"
            )
        tx = type(x)
        what = types.get(tx)
        if what is None:
            what = _other(x, path)
        if what is scalar:
            return x if on_scalar is None else on_scalar(x, path)
        if what is integer:
            if not lo <= x <= hi:
                raise EncodeError(f"integer out of range at `{format_path(path)}`: expected int64, got {x}")
            return x if on_scalar is None else on_scalar(x, path)
        if type(what) is not str:  # a TensorKind
            return x if on_tensor is None else on_tensor(x, cast(TensorKind, what), path)
        if on_enter is not None:
            on_enter(x, what, path)
        depth += 1
        if what is DICT:
            values = []
            for key, value in x.items():
                tk = type(key)
                if not (tk is str or (tk is int and lo <= key <= hi)):
                    if tk is int:
                        raise EncodeError(f"dict key out of range at `{format_path(path)}`: expected int64, got {key}")
                    raise EncodeError(
                        f"unsupported dict key at `{format_path(path)}`: expected str or int, "
                        f"got {tk.__module__}.{tk.__qualname__}"
                    )
                values.append([key, node(value, path + (key,), depth)])  # noqa: F821  (itself; deleted after the walk)
        elif what is LIST or what is TUPLE:
            values = [node(value, path + (i,), depth) for i, value in enumerate(x)]  # noqa: F821  (itself; deleted after the walk)
        else:  # NAMEDTUPLE, PACKED: by field name (a subclass may add properties; fields come first)
            values = [node(getattr(x, f), path + (f,), depth) for f in tx._fields]  # noqa: F821  (itself; deleted after the walk)
        return None if on_container is None else on_container(x, what, values, path)

    try:
        return node(obj, (), 0)
    finally:
        del node  # `node` refers to itself: without this each walk would leave a cycle for the GC
