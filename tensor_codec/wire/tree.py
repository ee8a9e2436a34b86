"""The tree of a message (docs/wire-format.md, section 3, which lists its nodes), as a receiver
takes it: validated once against its leaf table and compiled into a builder of its objects; and
the names namedtuple classes travel by (`register_namedtuple`). The sender's side (an object
flattened into this tree) is tensor_codec/tree.py's.
"""

from __future__ import annotations

import collections
import keyword
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast, final

from torch.nn.utils.rnn import PackedSequence

from ..errors import DecodeError, UsageError, Where, some_keys
from .kinds import TensorKind, kind_by_tag
from .limits import Limits
from .structure import DICT, INT64_MAX, INT64_MIN, LIST, MAX_DEPTH, NAMEDTUPLE, PACKED, PACKED_FIELDS, TUPLE

__all__ = [
    "compile_tree",
    "register_namedtuple",
    "namedtuple_name",
    "NAMEDTUPLES",
    "forget_generated_classes",
    "namedtuple_cost",
]

_MAX_NAME = 256
_MAX_FIELDS = 1024  # namedtuple fields accepted from the network (building a class costs O(fields))

NAMEDTUPLES: dict[str, type[Any]] = {}  # registered classes by the name they travel by


def register_namedtuple(cls: type, name: str | None = None) -> type:
    """Let received namedtuples come back as `cls` (found by a stable name, never imported); one
    not registered arrives as a generated class with the same name and fields (equal by value).
    Usable as a class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise UsageError(f"register_namedtuple: expected a namedtuple class, got {cls!r:.80}")
    NAMEDTUPLES[name or namedtuple_name(cls)] = cls
    return cls


def namedtuple_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# Decoding (input is hostile: check every type and key before use).
# A stream repeats its header: the header cache (received.py) keeps its builder, and later
# messages skip validation. Compiling costs O(1) per node whatever the depth (errors.Where), and
# subtrees without tensors fold into constants: the worst header within the limits stays cheap
# (docs/wire-format.md, section 7a).

# (leaf tensors, handed-out objects to append to) -> object. None instead of that list: the leaves
# are the decode's own, tracked by nothing (copied), and each becomes its object where its class
# allows (wire.kinds.handed_out_as, ``owned``).
Builder = Callable[[list, list | None], Any]


@final  # lets `type(part) is _Const` narrow both ways
class _Const:
    """A subtree without tensors whose value is immutable: built once, shared by every object."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


def _builder(part: _Const | Builder) -> Builder:
    if type(part) is _Const:
        value = part.value
        return lambda tensors, out: value
    return part


@dataclass(slots=True)
class _Compiler:
    leaves: list  # the validated leaf table (header.ReceivedLeaf)
    max_namedtuple_fields: int
    next: int = 0  # the leaf the next tensor node must take
    nodes: int = 0  # tree nodes compiled: what a cached builder costs to keep
    namedtuple_types: set = field(default_factory=set)
    namedtuple_fields: int = 0  # cost units over the distinct namedtuple types (namedtuple_cost)


def compile_tree(tree: Any, leaves: list, bounds: Limits) -> tuple[Builder, int]:
    """Validate a received tree against its leaf table under `bounds` (the limits in force);
    -> (a builder for its objects, node count)."""
    compiler = _Compiler(leaves, bounds.namedtuple_fields)
    builder = _builder(_compile(tree, compiler, "tc.header.tree", 0))
    if compiler.next != len(leaves):
        raise DecodeError(
            f"tc.header.tree: expected every one of the {len(leaves)} leaves to be referenced, "
            f"got {compiler.next} references"
        )
    return builder, compiler.nodes


_CONTAINER_KEYS = frozenset({"t", "items"})
_FLOAT_KEYS = frozenset({"t", "v"})
_SPECIAL_FLOATS = MappingProxyType({"nan": math.nan, "inf": math.inf, "-inf": -math.inf})


def _compile(node: Any, comp: _Compiler, where: Any, depth: int) -> _Const | Builder:
    if depth > MAX_DEPTH:
        raise DecodeError(f"{where}: expected at most {MAX_DEPTH} nesting levels, got more")
    comp.nodes += 1
    if type(node) is not dict:
        return _compile_scalar(node, where)
    tag = node.get("t")
    if type(tag) is not str:
        raise DecodeError(f"{where}.t: expected a string tag, got {tag!r:.80}")
    kind = kind_by_tag(tag, where)  # a TVTensor's imports torchvision on first sight (or is refused)
    if kind is not None:
        return _compile_tensor(node, kind, comp, where)
    if tag == LIST or tag == TUPLE:
        return _compile_sequence(node, tag, comp, where, depth)
    if tag == DICT:
        return _compile_dict(node, comp, where, depth)
    if tag == NAMEDTUPLE:
        return _compile_namedtuple(node, comp, where, depth)
    if tag == PACKED:
        return _compile_packed_sequence(node, comp, where, depth)
    if tag == "float":
        return _compile_float(node, where)
    raise DecodeError(
        f"{where}.t: expected a known tag (tensor kinds, list, tuple, dict, namedtuple, "
        f"PackedSequence, float), got {tag!r:.80}"
    )


def _compile_scalar(node: Any, where: Any) -> _Const:
    tn = type(node)
    if node is None or tn is bool or tn is str:
        return _Const(node)
    if tn is float:
        if not math.isfinite(node):  # 1e400 parses to inf; non-finite floats use {"t": "float"}
            raise DecodeError(f"{where}: expected a finite number, got {node!r:.80}")
        return _Const(node)
    if tn is int:
        if not INT64_MIN <= node <= INT64_MAX:
            raise DecodeError(f"{where}: expected an int64 value, got {node!r:.40}")
        return _Const(node)
    raise DecodeError(f"{where}: expected a tree node (object or scalar), got {_json_type(node)}")


_SCALAR_TYPES = frozenset({type(None), bool, str, int, float})


def _valid_scalars(items: list, types: set) -> bool:
    """Whether every int is int64 and every float finite, checked at C speed."""
    if int in types:
        ints = items if len(types) == 1 else [v for v in items if type(v) is int]
        if min(ints) < INT64_MIN or max(ints) > INT64_MAX:
            return False
    if float in types:
        floats = items if len(types) == 1 else [v for v in items if type(v) is float]
        if not all(map(math.isfinite, floats)):
            return False
    return True


def _compile_sequence(node: dict, tag: str, comp: _Compiler, where: Any, depth: int) -> _Const | Builder:
    items = node.get("items")
    if node.keys() != _CONTAINER_KEYS or type(items) is not list:
        _expect_keys(node, _CONTAINER_KEYS, where)
        items = _expect_list(node, "items", where)
    types = set(map(type, items))
    if depth < MAX_DEPTH and types <= _SCALAR_TYPES and _valid_scalars(items, types):
        # Plain values (most items of big lists), checked as a whole at C speed.
        comp.nodes += len(items)
        values = items
    else:
        parts: list[_Const | Builder] = []
        constant = True
        for i, v in enumerate(items):
            part = _compile(v, comp, Where((where, ".items[{}]", i)), depth + 1)
            parts.append(part)
            if constant and type(part) is not _Const:
                constant = False
        if constant:
            values = [p.value for p in cast("list[_Const]", parts)]
        else:
            builders = [_builder(p) for p in parts]
            if tag == LIST:
                return lambda tensors, out: [b(tensors, out) for b in builders]
            return lambda tensors, out: tuple([b(tensors, out) for b in builders])
    # No tensor inside. `values` is never changed after this.
    if tag == TUPLE:
        return _Const(tuple(values))  # immutable all the way down: shared
    return lambda tensors, out: values.copy()  # a fresh list per object


def _compile_float(node: dict, where: Any) -> _Const:
    if node.keys() != _FLOAT_KEYS:
        _expect_keys(node, _FLOAT_KEYS, where)
    value = node["v"]
    if type(value) is not str or value not in _SPECIAL_FLOATS:
        raise DecodeError(f"{where}.v: expected 'nan', 'inf' or '-inf', got {value!r:.80}")
    return _Const(_SPECIAL_FLOATS[value])


def _compile_dict(node: dict, comp: _Compiler, where: Any, depth: int) -> _Const | Builder:
    if node.keys() != _CONTAINER_KEYS:
        _expect_keys(node, _CONTAINER_KEYS, where)
    parts: dict[str | int, _Const | Builder] = {}  # by key, in the sender's order
    for i, pair in enumerate(_expect_list(node, "items", where)):
        if type(pair) is not list or len(pair) != 2:
            raise DecodeError(
                f"{Where((where, '.items[{}]', i))}: expected a [key, value] pair, got {_json_type(pair)}"
            )
        key = pair[0]
        if not (type(key) is str or (type(key) is int and INT64_MIN <= key <= INT64_MAX)):
            raise DecodeError(f"{Where((where, '.items[{}][0]', i))}: expected a str or int64 key, got {key!r:.80}")
        if key in parts:
            raise DecodeError(f"{Where((where, '.items[{}][0]', i))}: expected unique keys, got {key!r:.80} twice")
        parts[key] = _compile(pair[1], comp, Where((where, ".items[{}][1]", i)), depth + 1)
    if all(type(p) is _Const for p in parts.values()):
        template = {k: p.value for k, p in cast("dict[str | int, _Const]", parts).items()}
        return lambda tensors, out: template.copy()  # a fresh dict per object
    pairs = [(k, _builder(p)) for k, p in parts.items()]
    return lambda tensors, out: {k: b(tensors, out) for k, b in pairs}


def _compile_tensor(node: dict, kind: TensorKind, comp: _Compiler, where: Any) -> Builder:
    keys = node.keys()
    if not (keys <= kind.node_keys and keys >= kind.required_node_keys):
        _expect_keys(node, kind.node_keys, where, required=kind.required_node_keys)
    index = node["leaf"]
    if type(index) is not int or index != comp.next or index >= len(comp.leaves):
        expected = comp.next if comp.next < len(comp.leaves) else "none (all leaves used)"
        raise DecodeError(f"{where}.leaf: expected leaf index {expected}, got {index!r:.80}")
    comp.next += 1
    attrs = kind.parse_attributes(node, where)
    grad = node.get("grad", False)
    if grad is not False:
        if grad is not True:
            raise DecodeError(f"{where}.grad: expected true or absent, got {grad!r:.80}")
        dtype = comp.leaves[index].dtype
        if not dtype.can_require_grad:
            raise DecodeError(
                f"{where}.grad: only floating point and complex tensors can require grad, got dtype {dtype.name}"
            )
    wrap = kind.wrap

    def build(tensors, out):
        tensor = tensors[index]
        if grad:
            tensor.requires_grad_(True)
        if out is None:  # leaves nothing else holds or tracks: each may become its object
            return wrap(tensor, attrs, True)
        obj = wrap(tensor, attrs)
        out.append(obj)
        return obj

    return build


def _compile_packed_sequence(node: dict, comp: _Compiler, where: Any, depth: int) -> Builder:
    _expect_keys(node, {"t", *PACKED_FIELDS}, where)
    parts: list[Builder | None] = []
    for f in PACKED_FIELDS:
        part = node[f]
        here = Where((where, ".{}", f))
        if part is None and f in ("sorted_indices", "unsorted_indices"):
            parts.append(None)
            continue
        if not (type(part) is dict and type(part.get("t")) is str and kind_by_tag(part["t"], here) is not None):
            raise DecodeError(f"{here}: expected a tensor, got {_json_type(part)}")
        parts.append(_builder(_compile(part, comp, here, depth + 1)))
        leaf = comp.leaves[comp.next - 1]  # a tensor node, checked above: it took the next leaf
        if f != "data" and (leaf.dtype.name != "int64" or len(leaf.shape) != 1):
            raise DecodeError(f"{here}: expected a 1-D int64 tensor, got {len(leaf.shape)}-D {leaf.dtype.name}")
    if (parts[2] is None) != (parts[3] is None):
        raise DecodeError(f"{where}: expected sorted_indices and unsorted_indices both present or both null")

    def build(tensors, out):
        values: list[Any] = [None if b is None else b(tensors, out) for b in parts]  # None: optional fields
        if values[1].device.type != "cpu":  # decoded onto a GPU: torch keeps batch_sizes on the CPU
            values[1] = values[1].cpu()
        # tuple.__new__ keeps exactly what was sent; the public constructor would recompute indices.
        return tuple.__new__(PackedSequence, tuple(values))

    return build


def _compile_namedtuple(node: dict, comp: _Compiler, where: Any, depth: int) -> Builder:
    _expect_keys(node, {"t", "name", "fields", "items"}, where)
    name, fields = node["name"], node["fields"]
    if type(name) is not str or not 0 < len(name) <= _MAX_NAME:
        raise DecodeError(
            f"{where}.name: expected a non-empty string of at most {_MAX_NAME} characters, got "
            f"{name[: _MAX_NAME + 1]!r}"
            if type(name) is str
            else f"{where}.name: expected a non-empty string, got {_json_type(name)}"
        )
    if type(fields) is not list or len(fields) > _MAX_FIELDS:
        what = f"{len(fields)} fields" if type(fields) is list else _json_type(fields)
        raise DecodeError(f"{where}.fields: expected a list of at most {_MAX_FIELDS} field names, got {what}")
    if not all(
        type(f) is str and f.isidentifier() and not f.startswith("_") and len(f) <= _MAX_NAME for f in fields
    ) or len(set(fields)) != len(fields):
        raise DecodeError(
            f"{where}.fields: expected a list of distinct identifiers not starting with '_', got {fields!r:.300}"
        )
    items = _expect_list(node, "items", where)
    if len(items) != len(fields):
        raise DecodeError(f"{where}.items: expected {len(fields)} items (one per field), got {len(items)}")
    field_tuple = tuple(fields)
    if (name, field_tuple) not in comp.namedtuple_types:
        comp.namedtuple_types.add((name, field_tuple))
        comp.namedtuple_fields += namedtuple_cost(len(field_tuple))
        if comp.namedtuple_fields > comp.max_namedtuple_fields:
            raise DecodeError(
                f"{where}.fields: expected at most {comp.max_namedtuple_fields} units over the distinct "
                f"namedtuple types of one message ({NAMEDTUPLE_TYPE_COST} per type plus one per field; "
                f"limits.namedtuple_fields), got {comp.namedtuple_fields}"
            )
    parts = [_builder(_compile(v, comp, Where((where, ".items[{}]", i)), depth + 1)) for i, v in enumerate(items)]
    generic = _generic_namedtuple(name, field_tuple, where)

    def build(tensors, out):
        # Looked up per object, so a class registered after this header was first seen is used.
        cls = NAMEDTUPLES.get(name)
        if cls is None or cls._fields != field_tuple:
            cls = generic
        return cls(*[b(tensors, out) for b in parts])

    return build


# Making a namedtuple class costs about as much as 32 fields (collections.namedtuple compiles
# code) plus a little per field, in time and in memory: a type is charged that, per message
# (limits.namedtuple_fields) and in the cache of generated classes.
NAMEDTUPLE_TYPE_COST = 32


def namedtuple_cost(fields: int) -> int:
    return NAMEDTUPLE_TYPE_COST + fields


# Generated namedtuple classes by (name, fields), least recently used first. Names come from the
# network: the cache is bounded by the cost of what it holds (~512 small classes, ~4 MB).
_GENERIC_NAMEDTUPLES: collections.OrderedDict[tuple[str, tuple[str, ...]], type] = collections.OrderedDict()
_GENERIC_CACHE_COST = 16_384
_generic_cost = 0
_generic_lock = threading.Lock()


def forget_generated_classes() -> None:
    """Empty the cache of generated namedtuple classes (benchmarks measure a cold start)."""
    global _generic_cost
    with _generic_lock:
        _GENERIC_NAMEDTUPLES.clear()
        _generic_cost = 0


def _generic_namedtuple(name: str, fields: tuple[str, ...], where: Any) -> type:
    global _generic_cost
    key = (name, fields)
    with _generic_lock:  # held while a class is made: two threads never make one twice
        cached = _GENERIC_NAMEDTUPLES.get(key)
        if cached is not None:
            _GENERIC_NAMEDTUPLES.move_to_end(key)  # a stream keeps getting the same class
            return cached
        short = name.rsplit(".", 1)[-1]
        if not short.isidentifier() or keyword.iskeyword(short):
            short = "NamedTuple"
        try:
            cls = collections.namedtuple(short, fields)  # type: ignore[misc]  # mypy wants a literal name
        except ValueError as e:
            raise DecodeError(f"{where}.fields: {e}") from None
        _GENERIC_NAMEDTUPLES[key] = cls
        _generic_cost += namedtuple_cost(len(fields))
        while _generic_cost > _GENERIC_CACHE_COST and len(_GENERIC_NAMEDTUPLES) > 1:
            (_, old_fields), _ = _GENERIC_NAMEDTUPLES.popitem(last=False)
            _generic_cost -= namedtuple_cost(len(old_fields))
    return cls


def _expect_keys(node: dict, allowed: set | frozenset, where: Any, required=None) -> None:
    required = allowed if required is None else required
    extra = node.keys() - allowed
    if extra:
        raise DecodeError(f"{where}: expected only keys {sorted(allowed)}, got unexpected {some_keys(extra, 16)}")
    missing = set(required) - node.keys()
    if missing:
        raise DecodeError(f"{where}: expected keys {sorted(required)}, missing {sorted(missing)}")


def _expect_list(node: dict, key: str, where: Any) -> list:
    value = node[key]
    if type(value) is not list:
        raise DecodeError(f"{where}.{key}: expected a list, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", int: "integer", float: "number", bool: "boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )
