"""The structure around the tensors: flatten an object into a JSON tree plus a list of tensors,
rebuild it on receipt, and map a function over the tensors of a structure keeping every type.

Tree nodes (docs/wire-format.md, "Tree"):

* JSON ``null``, ``true``/``false``, integers (int64 range), finite floats and strings stand for
  themselves;
* ``{"t": "float", "v": "nan" | "inf" | "-inf"}`` for non-finite floats;
* ``{"t": <tensor kind tag>, "leaf": i, ...attributes, "grad": true?}`` for a tensor or TVTensor;
* ``{"t": "list" | "tuple", "items": [...]}``, ``{"t": "dict", "items": [[key, node], ...]}``
  (keys are strings or int64 integers), ``{"t": "namedtuple", "name": ..., "fields": [...],
  "items": [...]}`` and ``{"t": "PackedSequence", "data": ..., "batch_sizes": ...,
  "sorted_indices": ..., "unsorted_indices": ...}``.

Leaves are numbered in depth-first order; a receiver requires each index exactly once, in order.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Callable

import torch
from torch.nn.utils.rnn import PackedSequence

from .errors import DecodeError, EncodeError, format_path
from .kinds import TensorKind, kind_by_tag, kind_of

__all__ = [
    "MAX_DEPTH",
    "flatten",
    "unflatten",
    "map_tensors",
    "iter_tensors",
    "leaf_paths",
    "register_namedtuple",
]

MAX_DEPTH = 64  # nesting levels; also stops self-referencing structures
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_MAX_NAME = 256

_SUPPORTED = (
    "a torch.Tensor, a TVTensor (Image, Video, Mask, BoundingBoxes, KeyPoints), a PackedSequence, "
    "dict, list, tuple, namedtuple, int, float, bool, str or None"
)

_PACKED_FIELDS = ("data", "batch_sizes", "sorted_indices", "unsorted_indices")
_NAMEDTUPLES: dict[str, type] = {}
_GENERIC_NAMEDTUPLES: dict[tuple[str, tuple[str, ...]], type] = {}


def register_namedtuple(cls: type, name: str | None = None) -> type:
    """Let received namedtuples come back as `cls` (found by a stable name, never imported).

    Without registration a namedtuple arrives as a generated namedtuple class with the same name
    and fields (equal by value). Usable as a class decorator.
    """
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise TypeError(f"expected a namedtuple class, got {cls!r}")
    _NAMEDTUPLES[name or _namedtuple_name(cls)] = cls
    return cls


def _namedtuple_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_namedtuple_type(tx: type) -> bool:
    return issubclass(tx, tuple) and hasattr(tx, "_fields") and tx is not tuple


# --------------------------------------------------------------------------------------------
# Encoding


def flatten(obj: Any) -> tuple[Any, list[tuple[torch.Tensor, tuple]]]:
    """-> (tree as JSON-able data, [(plain tensor, path parts), ...] in depth-first order)."""
    leaves: list[tuple[torch.Tensor, tuple]] = []
    tree = _encode(obj, (), leaves, 0)
    return tree, leaves


def _encode(x: Any, path: tuple, leaves: list, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise EncodeError(
            f"structure too deep at `{format_path(path)}`: expected at most {MAX_DEPTH} levels "
            "(is it self-referencing?)"
        )
    tx = type(x)
    kind = kind_of(x)
    if kind is not None:
        # Work on a plain alias: property reads on a TVTensor go through __torch_function__ (slow).
        plain = x if tx is torch.Tensor else x.as_subclass(torch.Tensor)
        node = {"t": kind.tag, "leaf": len(leaves)}
        node.update(kind.attributes(x))
        if plain.requires_grad:
            node["grad"] = True
        leaves.append((plain, path))
        return node
    if x is None or tx is bool or tx is str:
        return x
    if tx is int:
        if not _INT64_MIN <= x <= _INT64_MAX:
            raise EncodeError(f"integer out of range at `{format_path(path)}`: expected int64, got {x}")
        return x
    if tx is float:
        if math.isfinite(x):
            return x
        return {"t": "float", "v": "nan" if x != x else ("inf" if x > 0 else "-inf")}
    if tx is dict:
        items = []
        for key, value in x.items():
            if type(key) is int:
                if not _INT64_MIN <= key <= _INT64_MAX:
                    raise EncodeError(f"dict key out of range at `{format_path(path)}`: expected int64, got {key}")
            elif type(key) is not str:
                raise EncodeError(
                    f"unsupported dict key at `{format_path(path)}`: expected str or int, "
                    f"got {type(key).__module__}.{type(key).__qualname__}"
                )
            items.append([key, _encode(value, path + (key,), leaves, depth + 1)])
        return {"t": "dict", "items": items}
    if tx is list or tx is tuple:
        return {
            "t": "list" if tx is list else "tuple",
            "items": [_encode(v, path + (i,), leaves, depth + 1) for i, v in enumerate(x)],
        }
    if tx is PackedSequence:
        return {
            "t": "PackedSequence",
            **{
                f: _encode(getattr(x, f), path + (f,), leaves, depth + 1)
                for f in _PACKED_FIELDS
            },
        }
    if _is_namedtuple_type(tx):
        return {
            "t": "namedtuple",
            "name": _registered_name(tx),
            "fields": list(tx._fields),
            "items": [_encode(getattr(x, f), path + (f,), leaves, depth + 1) for f in tx._fields],
        }
    what = f"{tx.__module__}.{tx.__qualname__}"
    hint = ""
    if isinstance(x, torch.Tensor):
        hint = " (a tensor subclass; convert with .as_subclass(torch.Tensor) or use a TVTensor)"
    elif tx.__module__ == "numpy":
        hint = " (convert numpy values with torch.from_numpy(...) or .item())"
    raise EncodeError(f"unsupported type at `{format_path(path)}`: expected {_SUPPORTED}, got {what}{hint}")


def _registered_name(tx: type) -> str:
    for name, cls in _NAMEDTUPLES.items():
        if cls is tx:
            return name
    return _namedtuple_name(tx)


# --------------------------------------------------------------------------------------------
# Decoding (input is hostile: check every type and key before use)


class _LeafCursor:
    __slots__ = ("tensors", "next", "leaves", "outputs")

    def __init__(self, tensors: list[torch.Tensor], leaves: list):
        self.tensors = tensors
        self.leaves = leaves  # the validated leaf table (wire.ReceivedLeaf), for dtypes
        self.outputs: list[torch.Tensor] = []
        self.next = 0


def unflatten(tree: Any, tensors: list[torch.Tensor], leaves: list) -> tuple[Any, list[torch.Tensor]]:
    """Rebuild the object from a received tree and its decoded leaf tensors.

    -> (object, the leaf objects as handed out: TVTensors where the tree says so).
    """
    cursor = _LeafCursor(tensors, leaves)
    out = _decode(tree, cursor, "tc.header.tree", 0)
    if cursor.next != len(tensors):
        raise DecodeError(
            f"tc.header.tree: expected every one of the {len(tensors)} leaves to be referenced, "
            f"got {cursor.next} references"
        )
    return out, cursor.outputs


def leaf_paths(tree: Any) -> list[tuple]:
    """Path parts of each leaf of a tree that `unflatten` accepted, in leaf order (for messages)."""
    paths: list[tuple] = []

    def walk(node, path):
        if type(node) is not dict:
            return
        tag = node.get("t")
        if "leaf" in node:
            paths.append(path)
        elif tag in ("list", "tuple"):
            for i, item in enumerate(node["items"]):
                walk(item, path + (i,))
        elif tag == "dict":
            for key, item in node["items"]:
                walk(item, path + (key,))
        elif tag == "namedtuple":
            for field, item in zip(node["fields"], node["items"]):
                walk(item, path + (field,))
        elif tag == "PackedSequence":
            for field in _PACKED_FIELDS:
                walk(node[field], path + (field,))

    walk(tree, ())
    return paths


def _decode(node: Any, cur: _LeafCursor, where: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise DecodeError(f"{where}: expected at most {MAX_DEPTH} nesting levels, got more")
    tn = type(node)
    if node is None or tn is bool or tn is int or tn is str:
        if tn is int and not _INT64_MIN <= node <= _INT64_MAX:
            raise DecodeError(f"{where}: expected an int64 value, got {node}")
        return node
    if tn is float:
        return node
    if tn is not dict:
        raise DecodeError(f"{where}: expected a tree node (object or scalar), got {_json_type(node)}")
    tag = node.get("t")
    if type(tag) is not str:
        raise DecodeError(f"{where}.t: expected a string tag, got {tag!r}")
    kind = kind_by_tag(tag, where)
    if kind is not None:
        return _decode_tensor(node, kind, cur, where)
    if tag in ("list", "tuple"):
        _expect_keys(node, {"t", "items"}, where)
        items = _expect_list(node, "items", where)
        values = [_decode(v, cur, f"{where}.items[{i}]", depth + 1) for i, v in enumerate(items)]
        return values if tag == "list" else tuple(values)
    if tag == "dict":
        _expect_keys(node, {"t", "items"}, where)
        out = {}
        for i, pair in enumerate(_expect_list(node, "items", where)):
            here = f"{where}.items[{i}]"
            if type(pair) is not list or len(pair) != 2:
                raise DecodeError(f"{here}: expected a [key, value] pair, got {_json_type(pair)}")
            key = pair[0]
            if not (type(key) is str or (type(key) is int and _INT64_MIN <= key <= _INT64_MAX)):
                raise DecodeError(f"{here}[0]: expected a str or int64 key, got {key!r}")
            if key in out:
                raise DecodeError(f"{here}[0]: expected unique keys, got {key!r} twice")
            out[key] = _decode(pair[1], cur, f"{here}[1]", depth + 1)
        return out
    if tag == "float":
        _expect_keys(node, {"t", "v"}, where)
        special = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
        if node["v"] not in special:
            raise DecodeError(f"{where}.v: expected 'nan', 'inf' or '-inf', got {node['v']!r}")
        return special[node["v"]]
    if tag == "PackedSequence":
        return _decode_packed_sequence(node, cur, where, depth)
    if tag == "namedtuple":
        return _decode_namedtuple(node, cur, where, depth)
    raise DecodeError(
        f"{where}.t: expected a known tag (tensor kinds, list, tuple, dict, namedtuple, "
        f"PackedSequence, float), got {tag!r}"
    )


def _decode_tensor(node: dict, kind: TensorKind, cur: _LeafCursor, where: str) -> torch.Tensor:
    keys = node.keys()
    if not (keys <= kind.node_keys and keys >= kind.required_node_keys):
        _expect_keys(node, kind.node_keys, where, required=kind.required_node_keys)
    index = node["leaf"]
    if type(index) is not int or index != cur.next or index >= len(cur.tensors):
        expected = cur.next if cur.next < len(cur.tensors) else "none (all leaves used)"
        raise DecodeError(f"{where}.leaf: expected leaf index {expected}, got {index!r}")
    cur.next += 1
    attrs = kind.parse_attributes(node, where)
    tensor = cur.tensors[index]
    grad = node.get("grad", False)
    if grad is not False:
        if grad is not True:
            raise DecodeError(f"{where}.grad: expected true or absent, got {grad!r}")
        dtype = cur.leaves[index].dtype
        if not dtype.can_require_grad:
            raise DecodeError(
                f"{where}.grad: only floating point and complex tensors can require grad, got dtype {dtype.name}"
            )
        tensor.requires_grad_(True)
    out = kind.wrap(tensor, attrs)
    cur.outputs.append(out)
    return out


def _decode_packed_sequence(node: dict, cur: _LeafCursor, where: str, depth: int) -> PackedSequence:
    fields = _PACKED_FIELDS
    _expect_keys(node, {"t", *fields}, where)
    parts = {f: _decode(node[f], cur, f"{where}.{f}", depth + 1) for f in fields}
    for f in fields:
        value = parts[f]
        if value is None and f in ("sorted_indices", "unsorted_indices"):
            continue
        if type(value) is not torch.Tensor:
            raise DecodeError(f"{where}.{f}: expected a tensor, got {_json_type(node[f])}")
    batch_sizes = parts["batch_sizes"]
    if batch_sizes.dtype != torch.int64 or batch_sizes.dim() != 1:
        raise DecodeError(
            f"{where}.batch_sizes: expected a 1-D int64 tensor, got {batch_sizes.dim()}-D {batch_sizes.dtype}"
        )
    for f in ("sorted_indices", "unsorted_indices"):
        value = parts[f]
        if value is not None and (value.dtype != torch.int64 or value.dim() != 1):
            raise DecodeError(f"{where}.{f}: expected a 1-D int64 tensor, got {value.dim()}-D {value.dtype}")
    if (parts["sorted_indices"] is None) != (parts["unsorted_indices"] is None):
        raise DecodeError(f"{where}: expected sorted_indices and unsorted_indices both present or both null")
    # tuple.__new__ keeps exactly what was sent; the public constructor would recompute indices.
    return tuple.__new__(PackedSequence, tuple(parts[f] for f in fields))


def _decode_namedtuple(node: dict, cur: _LeafCursor, where: str, depth: int) -> tuple:
    _expect_keys(node, {"t", "name", "fields", "items"}, where)
    name, fields = node["name"], node["fields"]
    if type(name) is not str or not 0 < len(name) <= _MAX_NAME:
        raise DecodeError(f"{where}.name: expected a non-empty string of at most {_MAX_NAME} characters, got {name!r}")
    if (
        type(fields) is not list
        or not all(type(f) is str and f.isidentifier() and not f.startswith("_") for f in fields)
        or len(set(fields)) != len(fields)
    ):
        raise DecodeError(f"{where}.fields: expected a list of distinct identifiers not starting with '_', got {fields!r}")
    items = _expect_list(node, "items", where)
    if len(items) != len(fields):
        raise DecodeError(f"{where}.items: expected {len(fields)} items (one per field), got {len(items)}")
    values = [_decode(v, cur, f"{where}.items[{i}]", depth + 1) for i, v in enumerate(items)]
    cls = _NAMEDTUPLES.get(name)
    if cls is None or list(cls._fields) != fields:
        cls = _generic_namedtuple(name, tuple(fields), where)
    return cls(*values)


def _generic_namedtuple(name: str, fields: tuple[str, ...], where: str) -> type:
    key = (name, fields)
    cls = _GENERIC_NAMEDTUPLES.get(key)
    if cls is None:
        short = name.rsplit(".", 1)[-1]
        if not short.isidentifier():
            short = "NamedTuple"
        try:
            cls = collections.namedtuple(short, fields)
        except ValueError as e:
            raise DecodeError(f"{where}.fields: {e}") from None
        if len(_GENERIC_NAMEDTUPLES) < 1024:  # bounded: names come from the network
            _GENERIC_NAMEDTUPLES[key] = cls
    return cls


def _expect_keys(node: dict, allowed: set | frozenset, where: str, required=None) -> None:
    required = allowed if required is None else required
    extra = node.keys() - allowed
    if extra:
        raise DecodeError(f"{where}: expected only keys {sorted(allowed)}, got unexpected {sorted(extra)}")
    missing = set(required) - node.keys()
    if missing:
        raise DecodeError(f"{where}: expected keys {sorted(required)}, missing {sorted(missing)}")


def _expect_list(node: dict, key: str, where: str) -> list:
    value = node[key]
    if type(value) is not list:
        raise DecodeError(f"{where}.{key}: expected a list, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", int: "integer", float: "number", bool: "boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


# --------------------------------------------------------------------------------------------
# Mapping over the tensors of a structure


def map_tensors(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], obj: Any, _path: tuple = (), _depth: int = 0) -> Any:
    """Rebuild `obj` with every tensor replaced by ``fn(plain, original)``, keeping every type.

    `plain` is the tensor as a plain ``torch.Tensor``, `original` the object found in the
    structure (maybe a TVTensor). The result of `fn` is rewrapped like the original: container
    types, TVTensor classes and attributes all survive, which ``Tensor.pin_memory()``, ``.to()``
    or a DataLoader's pinning step do not guarantee (failure mode 3).
    """
    if _depth > MAX_DEPTH:
        raise EncodeError(f"structure too deep at `{format_path(_path)}`: expected at most {MAX_DEPTH} levels")
    tx = type(obj)
    kind = kind_of(obj)
    if kind is not None:
        plain = obj if tx is torch.Tensor else obj.as_subclass(torch.Tensor)
        return kind.wrap_like(fn(plain, obj), obj)
    if obj is None or tx in (bool, int, float, str):
        return obj
    if tx is dict:
        return {k: map_tensors(fn, v, _path + (k,), _depth + 1) for k, v in obj.items()}
    if tx is list:
        return [map_tensors(fn, v, _path + (i,), _depth + 1) for i, v in enumerate(obj)]
    if tx is tuple:
        return tuple(map_tensors(fn, v, _path + (i,), _depth + 1) for i, v in enumerate(obj))
    if tx is PackedSequence:
        return tuple.__new__(
            PackedSequence,
            tuple(map_tensors(fn, getattr(obj, f), _path + (f,), _depth + 1) for f in _PACKED_FIELDS),
        )
    if _is_namedtuple_type(tx):
        return tx(*(map_tensors(fn, getattr(obj, f), _path + (f,), _depth + 1) for f in tx._fields))
    raise EncodeError(f"unsupported type at `{format_path(_path)}`: expected {_SUPPORTED}, got {tx.__module__}.{tx.__qualname__}")


def iter_tensors(obj: Any, _path: tuple = (), _depth: int = 0):
    """Yield every tensor object of a supported structure, as found (TVTensors stay TVTensors)."""
    if _depth > MAX_DEPTH:
        raise EncodeError(f"structure too deep at `{format_path(_path)}`: expected at most {MAX_DEPTH} levels")
    tx = type(obj)
    if kind_of(obj) is not None:
        yield obj
    elif tx is dict:
        for k, v in obj.items():
            yield from iter_tensors(v, _path + (k,), _depth + 1)
    elif tx is list or tx is tuple:
        for i, v in enumerate(obj):
            yield from iter_tensors(v, _path + (i,), _depth + 1)
    elif tx is PackedSequence or _is_namedtuple_type(tx):
        for f in tx._fields:
            yield from iter_tensors(getattr(obj, f), _path + (f,), _depth + 1)
    elif not (obj is None or tx in (bool, int, float, str)):
        raise EncodeError(f"unsupported type at `{format_path(_path)}`: expected {_SUPPORTED}, got {tx.__module__}.{tx.__qualname__}")
