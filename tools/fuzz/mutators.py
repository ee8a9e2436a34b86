"""Structure-aware mutations of a valid message, and `make_case`: case `index` of run `seed`,
generated deterministically (a `random.Random` seeded by the pair), so any case can be made again.

A case starts from a seed message (tools/fuzz/seeds.py) and applies one to four mutations, in
phases so each sees the message in the form it edits:

1. ``tree.*``, ``leaf.*``, ``node.*``, ``struct.*``, ``top.*``: on the header parsed as a JSON
   tree (any node replaced by other JSON types, huge / negative / float / bool numbers, long
   strings, deep nesting; keys deleted, added, renamed, duplicated in the text; leaves' dtype,
   shape, strides, nbytes, offsets; tensor kinds and their attributes; containers, namedtuples,
   PackedSequences; whole subtrees moved, wrapped, dropped, inserted; the envelope: the header's
   ``version`` and ``transport`` members given other values and types, deleted, moved). Afterwards
   ``fixup`` (most of the time) renumbers leaves and rebuilds nbytes, offsets and the value to
   match, so the decoder's later checks and the data path are reached too;
2. ``text.*``: on the header text (truncation, character and UTF-8 bit flips, inserted tokens,
   duplicated spans and keys, number tokens, whitespace, BOM, deep nesting, long strings);
3. ``meta.*``: on the metadata dict (keys deleted, added, renamed; values of other types; the
   ``tc.ipc.*`` keys; the other transport; version 1's ``tc.version`` / ``tc.transport`` keys
   beside the header, or a whole version-1 message; the metadata not a dict at all);
4. ``value.*``: on the Arrow value recipe (truncated, extended, bit flips, bool and padding bytes,
   slices with offsets, misaligned buffers, validity bitmaps and nulls, other Arrow types,
   chunked arrays, non-Arrow objects).

Then the call is chosen: ``decode`` with or without ``copy=True`` / ``device="cpu"``, inside
``tc.scope()``, or ``receive`` of a (sometimes malformed) dora event dict.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import random
import re
from collections.abc import Callable
from typing import Any

from . import headers as hd
from .jsongen import (
    BAD_DTYPE_NAMES,
    BOX_FORMATS,
    DIM_INTS,
    DTYPE_NAMES,
    KEYS,
    RAW_NUMBERS,
    STRINGS,
    TENSOR_TAGS,
    TREE_TAGS,
    HeaderText,
    random_int,
    random_json,
    random_scalar,
)
from .seeds import Seed
from .values import ARROW_TYPES, logical_bytes, uint8_recipe

__all__ = ["Mutator", "MUTATORS", "make_case", "case_rng"]

# Wire format 2 has one codec key: its version and transport are members of the header.
CODEC_KEYS = ["tc.header"]
V1_KEYS = list(hd.V1_KEYS)  # version 1's keys beside tc.header: tc.version makes a message refused
IPC_KEYS = ["tc.ipc.handle", "tc.ipc.offset", "tc.ipc.size", "tc.ipc.event", "tc.ipc.slot", "tc.ipc.generation"]


class Ctx:
    """A case being built: the message parts, and the header tree while phase 1 edits it."""

    def __init__(self, seed: Seed, rng: random.Random):
        self.seed = seed
        self.rng = rng
        self.metadata: Any = dict(seed.metadata)
        self.value: dict = dict(seed.value)
        self.header: HeaderText | None = None
        self.structural = False  # a mutation moved tensor nodes: renumber before fixup

    @property
    def transport(self) -> str:
        """The transport the seed message was written for: fixup lays the leaves out for it (a
        mutated ``transport`` member of the header does not move them)."""
        return hd.transport_of(json.loads(self.seed.metadata["tc.header"]))

    def tree(self) -> HeaderText | None:
        if self.header is None and type(self.metadata) is dict:
            self.header = HeaderText.parse(self.metadata.get("tc.header"))
        return self.header

    def header_text(self) -> str | None:
        return (
            self.metadata.get("tc.header")
            if type(self.metadata) is dict and type(self.metadata.get("tc.header")) is str
            else None
        )


class Mutator:
    def __init__(self, name: str, phase: int, weight: float, fn: Callable[[Ctx], bool]):
        self.name, self.phase, self.weight, self.fn = name, phase, weight, fn


MUTATORS: list[Mutator] = []


def mutator(name: str, phase: int, weight: float = 1.0):
    def register(fn):
        MUTATORS.append(Mutator(name, phase, weight, fn))
        return fn

    return register


# ------------------------------------------------------------------------------------------------
# helpers over JSON trees


def _slots(root: Any, limit: int = 4000) -> list[tuple[Any, Any]]:
    """(container, key) of every node below `root` (breadth first, at most `limit`)."""
    out: list[tuple[Any, Any]] = []
    queue = [root]
    while queue and len(out) < limit:
        node = queue.pop()
        room = limit - len(out)
        if type(node) is dict:
            for k, v in itertools.islice(node.items(), room):
                out.append((node, k))
                queue.append(v)
        elif type(node) is list:
            for i in range(min(len(node), room)):
                out.append((node, i))
                queue.append(node[i])
    return out


def _dicts(root: Any, limit: int = 4000) -> list[dict]:
    found = [root] if type(root) is dict else []
    found += [c[k] for c, k in _slots(root, limit) if type(c[k]) is dict]
    return found


def _tree_nodes(h: HeaderText, pred: Callable[[dict], bool]) -> list[dict]:
    tree = h.tree.get("tree") if type(h.tree) is dict else None
    return [d for d in _dicts(tree) if type(d.get("t")) is str and pred(d)]


def _leaf(ctx: Ctx) -> dict | None:
    h = ctx.tree()
    leaves = hd.leaf_table(h.tree) if h else []
    return ctx.rng.choice(leaves) if leaves else None


def _perturb_int(rng: random.Random, v: Any, unit: int = 1) -> Any:
    if type(v) is not int:
        return random_int(rng)
    return rng.choice(
        [v + unit, v - unit, v + 1, v - 1, v * 2, v // 2, -v, 0, v + 64, v - 64, v + 2**62, random_int(rng)]
    )


def _other_type(rng: random.Random, v: Any) -> Any:
    """`v` as another JSON type (int <-> str <-> bool <-> float <-> list <-> null <-> object)."""
    choices = [None, True, False, str(v)[:64], [v], {"v": v}]
    if type(v) is int:
        choices += [float(v) if abs(v) < 2**1000 else 1e308, v != 0]
    elif type(v) is str:
        choices += [len(v), v.upper(), v + " ", int(v) if v.isdigit() and len(v) < 100 else 0]
    elif type(v) is float:
        choices += [int(v) if v == v and abs(v) < 1e300 else 0]
    return rng.choice(choices)


# ------------------------------------------------------------------------------------------------
# phase 1: the header as a tree


@mutator("tree.replace", 1, 4)
def _tree_replace(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    if h is None:
        return False
    slots = _slots(h.tree)
    if not slots or rng.random() < 0.03:
        h.tree = random_json(rng, 0, h)
        return True
    container, key = rng.choice(slots)
    old = container[key]
    container[key] = _other_type(rng, old) if rng.random() < 0.3 else random_json(rng, 0, h)
    return True


@mutator("tree.delete_key", 1, 2)
def _tree_delete_key(ctx: Ctx) -> bool:
    h = ctx.tree()
    dicts = [d for d in _dicts(h.tree) if d] if h else []
    if not dicts:
        return False
    d = ctx.rng.choice(dicts)
    del d[ctx.rng.choice(list(d))]
    return True


@mutator("tree.add_key", 1, 2)
def _tree_add_key(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    dicts = _dicts(h.tree) if h else []
    if not dicts:
        return False
    d = rng.choice(dicts)
    key = rng.choice(KEYS) if rng.random() < 0.8 else rng.choice(STRINGS)
    d[key] = random_json(rng, 1, h)
    return True


@mutator("tree.rename_key", 1, 1.5)
def _tree_rename_key(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    dicts = [d for d in _dicts(h.tree) if d] if h else []
    if not dicts:
        return False
    d = rng.choice(dicts)
    key = rng.choice(list(d))
    new = rng.choice([key.upper(), key + " ", " " + key, key[:-1], key + "s", rng.choice(KEYS), key + "\u0000"])
    value = d.pop(key)
    d[new] = value
    return True


@mutator("tree.duplicate_key", 1, 1.5)
def _tree_duplicate_key(ctx: Ctx) -> bool:
    """The same key twice in one object, in the text (the last one wins in most parsers)."""
    h, rng = ctx.tree(), ctx.rng
    dicts = [d for d in _dicts(h.tree) if d] if h else []
    if not dicts:
        return False
    d = rng.choice(dicts)
    key = rng.choice(list(d))
    if key.startswith("\u0001"):
        return False
    h.duplicate_key(d, key, d[key] if rng.random() < 0.3 else random_json(rng, 1, h))
    if rng.random() < 0.5:  # the duplicate first, the original value last
        value = d.pop(key)
        d[key] = value
    return True


@mutator("tree.swap", 1, 1.5)
def _tree_swap(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    slots = _slots(h.tree) if h else []
    if len(slots) < 2:
        return False
    (c1, k1), (c2, k2) = rng.sample(slots, 2)
    try:
        # copies: one node may hold the other, and a tree must not come to contain itself
        c1[k1], c2[k2] = copy.deepcopy(c2[k2]), copy.deepcopy(c1[k1])
    except (KeyError, IndexError):
        return False
    return True


@mutator("tree.raw_number", 1, 1.5)
def _tree_raw_number(ctx: Ctx) -> bool:
    """A number replaced by a token JSON libraries write rarely or never (NaN, 1e400, 5000 digits)."""
    h, rng = ctx.tree(), ctx.rng
    slots = [(c, k) for c, k in (_slots(h.tree) if h else []) if type(c[k]) in (int, float)]
    if not slots:
        return False
    c, k = rng.choice(slots)
    c[k] = h.raw(rng.choice(RAW_NUMBERS))
    return True


@mutator("leaf.dtype", 1, 2)
def _leaf_dtype(ctx: Ctx) -> bool:
    leaf = _leaf(ctx)
    if leaf is None:
        return False
    r = ctx.rng.random()
    leaf["dtype"] = (
        ctx.rng.choice(DTYPE_NAMES)
        if r < 0.7
        else (ctx.rng.choice(BAD_DTYPE_NAMES) if r < 0.9 else _other_type(ctx.rng, leaf.get("dtype")))
    )
    return True


def _mutate_dims(rng: random.Random, dims: Any) -> Any:
    if type(dims) is not list:
        return [rng.choice(DIM_INTS)]
    dims = list(dims)
    op = rng.randrange(9)
    if op == 0 and dims:
        dims[rng.randrange(len(dims))] = rng.choice(DIM_INTS)
    elif op == 1:
        dims.insert(rng.randrange(len(dims) + 1), rng.choice(DIM_INTS))
    elif op == 2 and dims:
        dims.pop(rng.randrange(len(dims)))
    elif op == 3:
        dims = []
    elif op == 4:
        dims = dims + [1] * rng.choice([1, 63 - len(dims), 64 - len(dims), 65 - len(dims), 200])
    elif op == 5 and dims:
        dims[rng.randrange(len(dims))] = _other_type(rng, dims[0])
    elif op == 6:
        rng.shuffle(dims)
    elif op == 7 and dims:
        i = rng.randrange(len(dims))
        dims[i] = _perturb_int(rng, dims[i])
    else:
        return _other_type(rng, dims)
    return dims


@mutator("leaf.shape", 1, 2)
def _leaf_shape(ctx: Ctx) -> bool:
    leaf = _leaf(ctx)
    if leaf is None:
        return False
    leaf["shape"] = _mutate_dims(ctx.rng, leaf.get("shape"))
    if ctx.rng.random() < 0.5 and type(leaf["shape"]) is list and type(leaf.get("strides")) is list:
        # keep the rank consistent so the layout check, not the rank check, decides
        shape = leaf["shape"]
        strides = list(leaf["strides"])[: len(shape)]
        strides += [ctx.rng.choice([0, 1, 2**62])] * (len(shape) - len(strides))
        leaf["strides"] = strides
    return True


@mutator("leaf.strides", 1, 2)
def _leaf_strides(ctx: Ctx) -> bool:
    leaf = _leaf(ctx)
    if leaf is None:
        return False
    leaf["strides"] = _mutate_dims(ctx.rng, leaf.get("strides"))
    return True


@mutator("leaf.nbytes", 1, 1.5)
def _leaf_nbytes(ctx: Ctx) -> bool:
    leaf = _leaf(ctx)
    if leaf is None:
        return False
    dtype = leaf.get("dtype")
    unit = hd.ITEMSIZE.get(dtype, 1) if type(dtype) is str else 1
    leaf["nbytes"] = (
        _perturb_int(ctx.rng, leaf.get("nbytes"), unit)
        if ctx.rng.random() < 0.8
        else _other_type(ctx.rng, leaf.get("nbytes"))
    )
    return True


@mutator("leaf.offset", 1, 1.5)
def _leaf_offset(ctx: Ctx) -> bool:
    leaf = _leaf(ctx)
    if leaf is None:
        return False
    leaf["offset"] = (
        _perturb_int(ctx.rng, leaf.get("offset"), 64)
        if ctx.rng.random() < 0.8
        else _other_type(ctx.rng, leaf.get("offset"))
    )
    return True


@mutator("leaf.relayout", 1, 3)
def _leaf_relayout(ctx: Ctx) -> bool:
    """A new dtype and a layout a writer may produce (then fixup makes nbytes, offsets, value fit)."""
    leaf = _leaf(ctx)
    if leaf is None:
        return False
    dtype, shape, strides, nbytes = hd.random_layout(ctx.rng)
    if ctx.rng.random() < 0.3:
        old = leaf.get("dtype")
        dtype = old if type(old) is str and old in hd.ITEMSIZE else dtype
        nbytes = hd.required_nbytes(hd.ITEMSIZE[dtype], shape, strides) or 0
    leaf.update(dtype=dtype, shape=shape, strides=strides, nbytes=nbytes)
    ctx.structural = True
    return True


@mutator("node.tag", 1, 2)
def _node_tag(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    nodes = _tree_nodes(h, lambda d: True) if h else []
    if not nodes:
        return False
    node = rng.choice(nodes)
    if node["t"] in TENSOR_TAGS and rng.random() < 0.6:
        # another tensor kind, with that kind's attributes (a valid node) or with the old ones
        fresh = hd.random_tensor_node(rng, node.get("leaf", 0))
        if rng.random() < 0.7:
            for k in [k for k in node if k not in ("t", "leaf")]:
                del node[k]
            node.update(fresh)
        else:
            node["t"] = fresh["t"]
    else:
        node["t"] = rng.choice(TREE_TAGS) if rng.random() < 0.8 else _other_type(rng, node["t"])
    return True


@mutator("node.leaf_index", 1, 1.5)
def _node_leaf_index(ctx: Ctx) -> bool:
    h = ctx.tree()
    nodes = _tree_nodes(h, lambda d: "leaf" in d) if h else []
    if not nodes:
        return False
    node = ctx.rng.choice(nodes)
    node["leaf"] = _perturb_int(ctx.rng, node["leaf"]) if ctx.rng.random() < 0.8 else _other_type(ctx.rng, node["leaf"])
    return True


@mutator("node.attributes", 1, 2)
def _node_attributes(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    nodes = _tree_nodes(h, lambda d: d["t"] in TENSOR_TAGS) if h else []
    if not nodes:
        return False
    node = rng.choice(nodes)
    what = rng.choice(["format", "canvas_size", "clamping_mode", "grad"])
    if what == "format":
        node["format"] = rng.choice(BOX_FORMATS + ["xyxy", "XYXY ", "", "BoundingBoxFormat.XYXY", 0, None])
    elif what == "canvas_size":
        node["canvas_size"] = rng.choice(
            [
                [rng.choice(DIM_INTS), rng.choice(DIM_INTS)],
                [2**31, 1],
                [1, 2**31 - 1],
                [-1, 5],
                [1.0, 2],
                [True, 2],
                [1],
                [1, 2, 3],
                "[1,2]",
                None,
                {"h": 1, "w": 2},
            ]
        )
    elif what == "clamping_mode":
        node["clamping_mode"] = rng.choice(["soft", "hard", None, "SOFT", "none", "", 1, False, ["soft"]])
    else:
        node["grad"] = rng.choice([True, True, False, 1, "true", None])
    return True


@mutator("node.container", 1, 2)
def _node_container(ctx: Ctx) -> bool:
    """A list / tuple / dict node's items: not a list, pairs malformed, keys of other types, keys
    duplicated, items added (scalars or a second reference to a tensor node)."""
    h, rng = ctx.tree(), ctx.rng
    nodes = _tree_nodes(h, lambda d: d["t"] in ("list", "tuple", "dict")) if h else []
    if not nodes:
        return False
    node = rng.choice(nodes)
    items = node.get("items")
    if type(items) is not list or rng.random() < 0.1:
        node["items"] = _other_type(rng, items)
        return True
    if node["t"] == "dict" and items and rng.random() < 0.6:
        pair = rng.choice(items)
        if type(pair) is list and pair:
            op = rng.randrange(4)
            if op == 0:
                pair[0] = rng.choice([None, 1.5, True, [1], {"k": 1}, 2**63, -(2**63) - 1, 2**63 - 1, "", "\ud800"])
            elif op == 1:
                items.append([pair[0], 0])  # duplicate key
            elif op == 2:
                pair.append(None)
            else:
                pair.pop()
        return True
    tensors = hd.tensor_nodes(node)
    if tensors and rng.random() < 0.3:
        items.insert(rng.randrange(len(items) + 1), json.loads(json.dumps(rng.choice(tensors))))  # same leaf twice
    else:
        items.insert(
            rng.randrange(len(items) + 1),
            random_json(rng, 2, h) if node["t"] != "dict" else [rng.choice(STRINGS), random_scalar(rng)],
        )
    return True


@mutator("node.namedtuple", 1, 1.5)
def _node_namedtuple(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    nodes = _tree_nodes(h, lambda d: d["t"] == "namedtuple") if h else []
    if not nodes:
        # make one: wrap an existing node
        nodes_any = _tree_nodes(h, lambda d: True) if h else []
        if not nodes_any:
            return False
        target = rng.choice(nodes_any)
        inner = dict(target)
        target.clear()
        target.update({"t": "namedtuple", "name": "tools.fuzz.Made", "fields": ["a"], "items": [inner]})
        return True
    node = rng.choice(nodes)
    op = rng.randrange(6)
    fields = node.get("fields") if type(node.get("fields")) is list else []
    if op == 0:
        node["name"] = rng.choice(
            [
                "",
                "x" * 256,
                "x" * 257,
                "class",
                "a.b.class",
                "tools.fuzz.seeds.Pair",
                "tensor_codec.testing.Point",
                "\u00e9t\u00e9",
                "1abc",
                "a..b",
                ".",
                None,
                5,
                ["n"],
            ]
        )
    elif op == 1 and fields:
        fields[rng.randrange(len(fields))] = rng.choice(
            ["class", "_x", "1a", "a b", "", "\u00e9", "x" * 300, fields[0], "self", 3, None]
        )
        node["fields"] = fields
    elif op == 2:
        n = rng.choice([0, 1, 1024, 1025, 2049])
        node["fields"] = [f"f{i}" for i in range(n)]
        node["items"] = [None] * (n if rng.random() < 0.8 else n + 1)
    elif op == 3:
        node["items"] = (node.get("items") or []) + [None] if rng.random() < 0.5 else (node.get("items") or [])[:-1]
    elif op == 4:
        node["fields"] = _other_type(rng, node.get("fields"))
    else:
        node["name"] = rng.choice(STRINGS)
    return True


@mutator("node.packed", 1, 1.5)
def _node_packed(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    nodes = _tree_nodes(h, lambda d: d["t"] == "PackedSequence") if h else []
    if not nodes:
        return False
    node = rng.choice(nodes)
    op = rng.randrange(5)
    fields = list(hd.PACKED_FIELDS)
    if op == 0:
        a, b = rng.sample(fields, 2)
        node[a], node[b] = node.get(b), node.get(a)
    elif op == 1:
        node[rng.choice(fields[2:])] = None
    elif op == 2:
        node["sorted_indices"] = node["unsorted_indices"] = None
    elif op == 3:
        node[rng.choice(fields)] = rng.choice([None, 0, [], {"t": "list", "items": []}, {"t": "tensor"}])
    else:
        node[rng.choice(fields)] = hd.random_tensor_node(rng, 0)
        ctx.structural = True
    return True


@mutator("node.float", 1, 0.7)
def _node_float(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    nodes = _tree_nodes(h, lambda d: d["t"] == "float") if h else []
    if not nodes:  # add one
        lists = _tree_nodes(h, lambda d: d["t"] in ("list", "tuple") and type(d.get("items")) is list) if h else []
        if not lists:
            return False
        rng.choice(lists)["items"].append({"t": "float", "v": rng.choice(["nan", "inf", "-inf"])})
        return True
    node = rng.choice(nodes)
    node["v"] = rng.choice(["nan", "inf", "-inf", "NaN", "Infinity", "-nan", "1.5", "", 1.5, None, h.raw("NaN")])
    return True


@mutator("struct.wrap", 1, 1.5)
def _struct_wrap(ctx: Ctx) -> bool:
    """A node wrapped in a list / tuple / dict / namedtuple / PackedSequence (a valid tree)."""
    h, rng = ctx.tree(), ctx.rng
    if h is None or type(h.tree) is not dict or "tree" not in h.tree:
        return False
    candidates = _tree_nodes(h, lambda d: True)
    target = rng.choice(candidates) if candidates and rng.random() < 0.7 else None
    inner = dict(target) if target is not None else h.tree["tree"]
    kind = rng.choice(["list", "tuple", "dict", "namedtuple", "packed"])
    if kind in ("list", "tuple"):
        outer = {"t": kind, "items": [inner]}
    elif kind == "dict":
        outer = {"t": "dict", "items": [[rng.choice(["k", "", 0, -(2**63)]), inner]]}
    elif kind == "namedtuple":
        outer = {
            "t": "namedtuple",
            "name": rng.choice(["tools.fuzz.W", "W", "x" * 256]),
            "fields": ["w"],
            "items": [inner],
        }
    else:
        if type(inner) is not dict or inner.get("t") not in TENSOR_TAGS:
            return False
        outer = {
            "t": "PackedSequence",
            "data": inner,
            "batch_sizes": hd.random_tensor_node(rng),
            "sorted_indices": None,
            "unsorted_indices": None,
        }
        if rng.random() < 0.5:
            outer["sorted_indices"] = hd.random_tensor_node(rng)
            outer["unsorted_indices"] = hd.random_tensor_node(rng)
    if target is not None:
        target.clear()
        target.update(outer)
    else:
        h.tree["tree"] = outer
    ctx.structural = True
    return True


@mutator("struct.insert_tensor", 1, 2)
def _struct_insert_tensor(ctx: Ctx) -> bool:
    """A new tensor node (any kind, valid attributes) with a new leaf of a random valid layout."""
    h, rng = ctx.tree(), ctx.rng
    if h is None or type(h.tree) is not dict:
        return False
    containers = _tree_nodes(
        h, lambda d: d["t"] in ("list", "tuple", "dict", "namedtuple") and type(d.get("items")) is list
    )
    node = hd.random_tensor_node(rng, -1)  # renumber gives it a leaf entry of its own
    if containers and rng.random() < 0.8:
        c = rng.choice(containers)
        if c["t"] == "dict":
            c["items"].insert(rng.randrange(len(c["items"]) + 1), [f"new{rng.randrange(1000)}", node])
        elif c["t"] == "namedtuple":
            fields = c.get("fields")
            if type(fields) is not list:
                return False
            c["items"].append(node)
            fields.append(f"new{len(fields)}")
        else:
            c["items"].insert(rng.randrange(len(c["items"]) + 1), node)
    else:
        h.tree["tree"] = {"t": "list", "items": [h.tree.get("tree"), node]}
    ctx.structural = True
    return True


@mutator("struct.drop", 1, 1)
def _struct_drop(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    containers = (
        _tree_nodes(h, lambda d: d["t"] in ("list", "tuple", "dict") and type(d.get("items")) is list and d["items"])
        if h
        else []
    )
    if not containers:
        return False
    c = rng.choice(containers)
    c["items"].pop(rng.randrange(len(c["items"])))
    ctx.structural = rng.random() < 0.8
    return True


@mutator("struct.shuffle", 1, 1)
def _struct_shuffle(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    containers = (
        _tree_nodes(
            h, lambda d: d["t"] in ("list", "tuple", "dict") and type(d.get("items")) is list and len(d["items"]) > 1
        )
        if h
        else []
    )
    if containers:
        rng.shuffle(rng.choice(containers)["items"])
    elif h is not None and len(hd.leaf_table(h.tree)) > 1:
        rng.shuffle(h.tree["leaves"])
    else:
        return False
    ctx.structural = rng.random() < 0.7
    return True


@mutator("top.keys", 1, 1)
def _top_keys(ctx: Ctx) -> bool:
    h, rng = ctx.tree(), ctx.rng
    if h is None:
        return False
    if type(h.tree) is not dict:
        h.tree = {**_envelope(ctx.transport), "leaves": [], "tree": h.tree}
        return True
    op = rng.randrange(7)
    if op == 0:
        h.tree.pop(rng.choice(["leaves", "tree", "version", "transport"]), None)
    elif op == 1:
        h.tree["producer"] = {"host": "x", "pidns": "", "pid": 1, "gpu": "GPU-00000000", "ledger": "tc-1-000000000000"}
    elif op == 6:  # host's optional GPU to restore onto (a GPU this process cannot see, or not a UUID)
        h.tree["gpu"] = rng.choice(
            ["GPU-00000000-1111-2222-3333-444444444444", "MIG-0123456789", "GPU-", "", "GPU-" + "0" * 64, 1, None, []]
        )
    elif op == 2:
        near = ["Version", "version ", "tc.version", "Transport", "transport ", "tc.transport", "extra", "Leaves"]
        h.tree[rng.choice(near + ["leaves ", "\u0000"])] = random_scalar(rng)
    elif op == 3:
        h.tree = rng.choice([[h.tree], h.tree.get("leaves"), h.tree.get("tree"), "header", 1, None, []])
    elif op == 4:
        h.tree["leaves"] = rng.choice(
            [[], None, {}, [None], [[]], [1], "leaves", [hd.random_leaf(rng)] * rng.choice([2, 4097, 5000])]
        )
    else:
        h.tree["tree"] = rng.choice([None, [], {}, {"t": "tensor"}, 1e308, -(2**63) - 1, 2**63, {"t": "list"}])
    return True


def _envelope(transport: str) -> dict:
    """The members a header starts with: the version and the transport's name."""
    return {"version": hd.VERSION, "transport": transport}


_VERSIONS = [
    hd.VERSION - 1,  # version 1's number, in a version 2 header
    hd.VERSION + 1,
    0,
    99,
    -hd.VERSION,
    2**31,
    2**63,
    10**30,
    float(hd.VERSION),
    True,
    False,
    str(hd.VERSION),
    "99",
    "",
    None,
    [hd.VERSION],
    {"version": hd.VERSION},
]
# The version as number tokens a JSON library may read as the int 2, or not at all.
_VERSION_TOKENS = ["2.0", "2e0", "2E0", "20e-1", "02", "+2", "0x2", "2.", "-0", "NaN", "Infinity", "1e400", "2" * 400]
_TRANSPORTS = [
    "HOST",
    "Host",
    "cuda_ipc",
    "CUDA-IPC",
    "host\u0000",
    " host",
    "host ",
    "cuda-ipc\n",
    "",
    "ipc",
    "shm",
    "auto",
    "host-to-gpu",
    "x" * 300,
    None,
    0,
    1,
    True,
    ["host"],
    {"name": "host"},
]


def _move_member(header: dict, key: str, rng: random.Random) -> None:
    """`key` moved to another place among the header's members (after the tree: the text no
    writer makes, which the reader reads whole instead of by its leaf table)."""
    value = header.pop(key)
    items = list(header.items())
    at = len(items) if rng.random() < 0.5 else rng.randrange(len(items) + 1)
    items.insert(at, (key, value))
    header.clear()
    header.update(items)


def _envelope_member(ctx: Ctx, key: str, values: list) -> bool:
    """The header's `key` member (version or transport): another value, a raw number token, a
    known one, deleted, moved, or written twice."""
    h, rng = ctx.tree(), ctx.rng
    if h is None or type(h.tree) is not dict:
        return False
    op = rng.random()
    if op < 0.55:
        h.tree[key] = rng.choice(values)
    elif op < 0.7:
        h.tree[key] = _other_type(rng, h.tree.get(key))
    elif op < 0.8:
        h.tree.pop(key, None)
    elif op < 0.9 and key in h.tree:
        _move_member(h.tree, key, rng)
    else:  # twice in the text: a valid value and another one, either first
        good = hd.VERSION if key == "version" else hd.transport_of(h.tree, ctx.transport)
        other = rng.choice(values)
        first, last = (good, other) if rng.random() < 0.5 else (other, good)
        h.tree[key] = last
        h.duplicate_key(h.tree, key, first)
        value = h.tree.pop(key)  # the placeholder (the first in the text) before the original
        h.tree[key] = value
    return True


@mutator("top.version", 1, 1)
def _top_version(ctx: Ctx) -> bool:
    """The header's `version` member: other versions (1, 3, 99...), the 2 of other types (2.0,
    True, "2") or as other number tokens (2e0, 02), deleted, moved, twice."""
    if ctx.rng.random() < 0.25 and ctx.tree() is not None and type(ctx.header.tree) is dict:
        ctx.header.tree["version"] = ctx.header.raw(ctx.rng.choice(_VERSION_TOKENS))
        return True
    return _envelope_member(ctx, "version", _VERSIONS)


@mutator("top.transport", 1, 1)
def _top_transport(ctx: Ctx) -> bool:
    """The header's `transport` member: names no transport has (case, spaces, NUL, a sender's
    choice such as auto), other types, the other transport's name, deleted, moved, twice."""
    other = [name for name in hd.TRANSPORTS if name != hd.transport_of(ctx.tree().tree if ctx.tree() else None)]
    return _envelope_member(ctx, "transport", _TRANSPORTS + other * 3)


@mutator("top.producer", 1, 1)
def _top_producer(ctx: Ctx) -> bool:
    """The CUDA IPC `producer` object: fields of other types and forms."""
    h, rng = ctx.tree(), ctx.rng
    if h is None or type(h.tree) is not dict or type(h.tree.get("producer")) is not dict:
        return False
    p = h.tree["producer"]
    key = rng.choice(["host", "pidns", "pid", "gpu", "ledger"])
    p[key] = rng.choice(
        {
            "host": ["", "x" * 301, "boot@other-machine", str(p.get("host", "")) + "x", 1, None],
            "pidns": ["", "x" * 101, "pid:[1]", 0],
            "pid": [0, -1, 2**31, 2**31 - 1, 1, "1", 1.0, True],
            "gpu": ["GPU-", "GPU-zzzzzzzz", "MIG-0123456789", "gpu-01234567", "GPU-" + "0" * 64, "GPU-01234567\n", ""],
            "ledger": [
                "tc-1-00000000000g",
                "tc-2-000000000000",
                "tc-1-000000000000",
                "tc-99999999999-000000000000",
                "../etc/passwd",
                "tc-1-0000000000000",
            ],
        }[key]
    )
    return True


def _finish_tree(ctx: Ctx, applied: list[str]) -> None:
    """End of phase 1: renumber and fix up (most of the time), then write the header text back."""
    h, rng = ctx.header, ctx.rng
    if h is None or type(ctx.metadata) is not dict:
        return
    fix = rng.random() < (0.9 if ctx.structural else 0.4)
    if fix and type(h.tree) is dict:
        if ctx.structural or rng.random() < 0.3:
            if type(h.tree.get("leaves")) is list:
                hd.renumber(h.tree, rng)
        fixed = hd.fixup(h.tree, ctx.transport, logical_bytes(ctx.value), rng)
        if fixed is not None:
            recipe, total = fixed
            if ctx.transport == "cuda-ipc":
                ctx.metadata["tc.ipc.size"] = total
            else:
                ctx.value = recipe
            applied.append("fixup")
    ctx.metadata["tc.header"] = h.dumps(rng)
    ctx.header = None


# ------------------------------------------------------------------------------------------------
# phase 2: the header text

# A version 2 host header without leaves, up to its tree.
_EMPTY = f'{{"version":{hd.VERSION},"transport":"host","leaves":[],"tree":'
_TEXT_CHARS = list('{}[],:"\\ 0123456789-+.eEtnfalsuru') + [
    "\u0000",
    "\u007f",
    "\u00e9",
    "\ud800",
    "\U0001f600",
    "\ufeff",
    "\n",
    "\t",
]
_TOKENS = [
    ",",
    "]",
    "}",
    "[",
    "{",
    '"',
    "\\",
    ":",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-0",
    "null",
    "true",
    '"\\u0000"',
    '"\\ud800"',
    '"x":1,',
    '"t":"tensor",',
    '"leaf":0,',
    "/*c*/",
    "//",
    "\u00a0",
    " ",
    "\n",
    "0" * 400,
    "'",
    "\ufeff",
    "\x00",
]
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_KEY = re.compile(r'"([A-Za-z_][A-Za-z0-9_.]*)":')
_BRACE = re.compile(r"\{")
_STRING = re.compile(r'"[^"\\]*"')


def _find_from(rng: random.Random, pattern: re.Pattern, s: str) -> tuple[int, int] | None:
    """The span of the first match at or after a random position (else the first match): one
    match picked without listing them all (a megabyte of digits has half a million)."""
    m = pattern.search(s, rng.randrange(len(s) + 1)) or pattern.search(s)
    return m.span() if m else None


def _text(ctx: Ctx) -> str | None:
    return ctx.header_text()


def _set_text(ctx: Ctx, text: str) -> bool:
    ctx.metadata["tc.header"] = text
    return True


@mutator("text.truncate", 2, 1)
def _text_truncate(ctx: Ctx) -> bool:
    s = _text(ctx)
    if s is None:
        return False
    return _set_text(ctx, s[: ctx.rng.randrange(len(s) + 1)])


@mutator("text.char_flip", 2, 1.5)
def _text_char_flip(ctx: Ctx) -> bool:
    s, rng = _text(ctx), ctx.rng
    if not s:
        return False
    for _ in range(rng.randrange(1, 5)):
        i = rng.randrange(len(s))
        s = s[:i] + rng.choice(_TEXT_CHARS) + s[i + 1 :]
    return _set_text(ctx, s)


@mutator("text.utf8_bit_flip", 2, 1)
def _text_utf8_bit_flip(ctx: Ctx) -> bool:
    s, rng = _text(ctx), ctx.rng
    if not s:
        return False
    raw = bytearray(s.encode("utf-8", "surrogatepass"))
    for _ in range(rng.randrange(1, 4)):
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    return _set_text(ctx, raw.decode("utf-8", "surrogateescape"))


@mutator("text.insert", 2, 1.5)
def _text_insert(ctx: Ctx) -> bool:
    s, rng = _text(ctx), ctx.rng
    if s is None:
        return False
    at = rng.randrange(len(s) + 1)
    return _set_text(ctx, s[:at] + rng.choice(_TOKENS) + s[at:])


@mutator("text.delete_span", 2, 1)
def _text_delete_span(ctx: Ctx) -> bool:
    s, rng = _text(ctx), ctx.rng
    if not s:
        return False
    a = rng.randrange(len(s))
    return _set_text(ctx, s[:a] + s[a + rng.randrange(1, 16) :])


@mutator("text.duplicate_span", 2, 1)
def _text_duplicate_span(ctx: Ctx) -> bool:
    s, rng = _text(ctx), ctx.rng
    if not s:
        return False
    a = rng.randrange(len(s))
    b = min(len(s), a + rng.randrange(1, 64))
    at = rng.randrange(len(s) + 1)
    return _set_text(ctx, s[:at] + s[a:b] + s[at:])


@mutator("text.duplicate_key", 2, 1)
def _text_duplicate_key(ctx: Ctx) -> bool:
    """`"key":value,` inserted after an opening brace (a key of the header, maybe twice now)."""
    s, rng = _text(ctx), ctx.rng
    if not s:
        return False
    brace = _find_from(rng, _BRACE, s)
    keys = _KEY.findall(s, 0, 1 << 16)
    if brace is None or not keys:
        return False
    at = brace[0] + 1
    value = json.dumps(random_json(rng, 2), ensure_ascii=False, allow_nan=True)
    return _set_text(ctx, s[:at] + f'"{rng.choice(keys)}":{value},' + s[at:])


@mutator("text.number", 2, 1.5)
def _text_number(ctx: Ctx) -> bool:
    s, rng = _text(ctx), ctx.rng
    span = _find_from(rng, _NUMBER, s) if s else None
    if span is None:
        return False
    a, b = span
    token = rng.choice(RAW_NUMBERS) if rng.random() < 0.5 else str(random_int(rng))
    return _set_text(ctx, s[:a] + token + s[b:])


@mutator("text.reformat", 2, 0.7)
def _text_reformat(ctx: Ctx) -> bool:
    """The same JSON written otherwise: indented, ASCII-escaped, a BOM, surrounding whitespace."""
    s, rng = _text(ctx), ctx.rng
    h = HeaderText.parse(s)
    if h is None:
        return False
    op = rng.randrange(4)
    if op == 0:
        return _set_text(ctx, json.dumps(h.tree, indent=rng.choice([0, 1, 4])))
    if op == 1:
        return _set_text(ctx, json.dumps(h.tree, ensure_ascii=True, separators=(",", ":")))
    if op == 2:
        return _set_text(ctx, "\ufeff" + s)
    return _set_text(
        ctx, rng.choice([" ", "\n", "\t", "\r\n", "\u00a0", "\x00"]) + s + rng.choice(["", " ", "\n", "\x00", "x"])
    )


@mutator("text.grow", 2, 0.7)
def _text_grow(ctx: Ctx) -> bool:
    """Big but bounded: a long string, long whitespace, deep brackets, many items (<= ~1 MB)."""
    s, rng = _text(ctx), ctx.rng
    if s is None:
        return False
    op = rng.randrange(4)
    n = rng.choice([1000, 65_536, 300_000, 1 << 20])
    if op == 0:
        span = _find_from(rng, _STRING, s)
        if span is None:
            return False
        a, b = span
        return _set_text(ctx, s[:a] + '"' + "x" * n + '"' + s[b:])
    if op == 1:
        at = rng.randrange(len(s) + 1)
        return _set_text(ctx, s[:at] + " " * n + s[at:])
    if op == 2:
        d = min(n, 200_000) // 2
        return _set_text(ctx, "[" * d + "]" * d if rng.random() < 0.5 else _EMPTY + "[" * d + "]" * d + "}")
    return _set_text(ctx, _EMPTY + '{"t":"list","items":[' + ",".join(["0"] * (n // 2)) + "]}}")


@mutator("text.replace", 2, 0.5)
def _text_replace(ctx: Ctx) -> bool:
    rng = ctx.rng
    if type(ctx.metadata) is not dict:
        return False
    return _set_text(
        ctx,
        rng.choice(
            [
                "",
                "{}",
                "[]",
                "null",
                "0",
                '""',
                '{"leaves":[],"tree":{"t":"list","items":[]}}',  # no version, no transport
                '{"version":1,"leaves":[],"tree":{"t":"list","items":[]}}',  # version 1's members
                _EMPTY + "null}",
                _EMPTY + '{"t":"list","items":[]}}',
                _EMPTY.replace('"leaves":[]', '"leaves":null') + "null}",
                _EMPTY + "1e400}",
                _EMPTY + "NaN}",
                _EMPTY + f'{{"t":"list","items":[]}},"version":{hd.VERSION}}}',  # a member twice
                _EMPTY.replace('"host"', '"cuda-ipc"').replace('"tree":', '"producer":null,"tree":null}'),
                "\ud800",
                "x" * 1000,
                json.dumps(random_json(rng), ensure_ascii=False, allow_nan=True),
            ]
        ),
    )


# ------------------------------------------------------------------------------------------------
# phase 3: the metadata dict

_V1_VERSIONS = [1, 1.0, True, "1", hd.VERSION, str(hd.VERSION), 0, 99, None, 10**30]
_HUGE_HANDLE = "A" * 1_400_000  # base64 of more than the 1 MiB a handle may have
_METADATA_KEYS = (
    CODEC_KEYS
    + V1_KEYS
    + IPC_KEYS
    + ["timestamp", "tc.extra", "tc.", "", "TC.VERSION", "tc.version ", "open_telemetry_context", "tc.ipc.unknown"]
)


def _metadata_value(rng: random.Random, key: str, old: Any) -> Any:
    common = [
        None,
        True,
        False,
        0,
        1,
        -1,
        2,
        1.0,
        "1",
        "",
        [1],
        {"v": 1},
        b"\x01",
        2**63,
        2**64,
        -(2**63) - 1,
        1e308,
        float("nan"),
        float("inf"),
    ]
    specific = {
        # version 1's keys, stray beside a version 2 header (tc.version: refused whatever it says)
        "tc.version": _V1_VERSIONS,
        "tc.transport": ["host", "cuda-ipc", "HOST", "cuda_ipc", "host\u0000", " host", "", "ipc", "shm"],
        "tc.header": ["", "{}", "null", '{"leaves":[],"tree":null}', _EMPTY + "null}", b"{}", ["{}"], 1]
        + ([old + " ", old[:-1], old.encode("utf-8", "surrogatepass")] if type(old) is str else []),
        "tc.ipc.handle": [
            "",
            "!!!!",
            "AAAA",
            "AAA",
            "AAAA=",
            "AAAAAAAA====",
            base64.b64encode(b"\x01e\x00").decode(),
            base64.b64encode(b"\x01x" + bytes(64)).decode(),
            base64.b64encode(bytes(64)).decode(),
            base64.b64encode(bytes(65)).decode(),
            _HUGE_HANDLE,
            base64.b64encode(b"\x01c" + bytes(64)).decode() + "\n",
        ],
        "tc.ipc.event": [
            "",
            base64.b64encode(bytes(63)).decode(),
            base64.b64encode(bytes(65)).decode(),
            base64.b64encode(bytes(64)).decode(),
            "%%%",
        ],
        "tc.ipc.offset": [0, -1, 2**48, 2**48 + 1, 255, 1 << 40],
        "tc.ipc.size": [0, -1, 1, 2**48, 2**48 + 1] + ([old + 1, old - 1] if type(old) is int else []),
        "tc.ipc.slot": [0, 65535, 65536, -1],
        "tc.ipc.generation": [0, 1, 2**63 - 1, 2**63, -1],
    }.get(key, [])
    r = rng.random()
    if specific and r < 0.6:
        return rng.choice(specific)
    if r < 0.8:
        return rng.choice(common)
    return _other_type(rng, old)


@mutator("meta.delete_key", 3, 1)
def _meta_delete_key(ctx: Ctx) -> bool:
    m = ctx.metadata
    if type(m) is not dict or not m:
        return False
    del m[ctx.rng.choice(list(m))]
    return True


@mutator("meta.add_key", 3, 1)
def _meta_add_key(ctx: Ctx) -> bool:
    m, rng = ctx.metadata, ctx.rng
    if type(m) is not dict:
        return False
    key = rng.choice(_METADATA_KEYS) if rng.random() < 0.9 else rng.choice([1, None, ("tc.header",)])
    m[key] = _metadata_value(rng, key if type(key) is str else "", m.get(key))
    return True


@mutator("meta.rename_key", 3, 0.7)
def _meta_rename_key(ctx: Ctx) -> bool:
    m, rng = ctx.metadata, ctx.rng
    keys = [k for k in m if type(k) is str] if type(m) is dict else []
    if not keys:
        return False
    key = rng.choice(keys)
    m[rng.choice([key.upper(), key + " ", key.replace(".", "_"), key[:-1], "tc." + key])] = m.pop(key)
    return True


@mutator("meta.retype", 3, 2)
def _meta_retype(ctx: Ctx) -> bool:
    m, rng = ctx.metadata, ctx.rng
    if type(m) is not dict:
        return False
    keys = [k for k in CODEC_KEYS + IPC_KEYS if k in m] or CODEC_KEYS
    key = rng.choice(keys)
    m[key] = _metadata_value(rng, key, m.get(key))
    return True


_TRANSPORT_MEMBER = re.compile(r'"transport"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _header_transport(text: str | None) -> tuple[str | None, tuple[int, int] | None]:
    """The transport a header text names in its first ``"transport":"..."`` member (read from the
    text, so that a header mutated in phase 2 keeps its edits), and that string's span."""
    m = _TRANSPORT_MEMBER.search(text) if text else None
    if m is None:
        return None, None
    try:
        return json.loads(f'"{m.group(1)}"'), m.span(1)
    except ValueError:
        return None, m.span(1)


@mutator("meta.transport", 3, 0.7)
def _meta_transport(ctx: Ctx) -> bool:
    """The other transport for this header (host <-> cuda-ipc, the header's `transport` member),
    with or without the ``tc.ipc.*`` keys."""
    m, rng = ctx.metadata, ctx.rng
    text = ctx.header_text()
    if type(m) is not dict or text is None:
        return False
    name, span = _header_transport(text)
    new = "host" if name == "cuda-ipc" else "cuda-ipc"
    if span is not None:
        m["tc.header"] = text[: span[0]] + new + text[span[1] :]
    else:  # no such member (deleted, or written otherwise): the header parsed, the member set
        h = HeaderText.parse(text)
        if h is None or type(h.tree) is not dict:
            return False
        h.tree["transport"] = new
        m["tc.header"] = h.dumps(rng)
    if new == "host":
        if rng.random() < 0.5:
            for k in IPC_KEYS:
                m.pop(k, None)
    else:
        if rng.random() < 0.7:
            m.update(
                {
                    "tc.ipc.handle": base64.b64encode(b"\x01c" + rng.randbytes(64)).decode(),
                    "tc.ipc.offset": 0,
                    "tc.ipc.size": len(logical_bytes(ctx.value) or b""),
                    "tc.ipc.event": base64.b64encode(rng.randbytes(64)).decode(),
                    "tc.ipc.slot": 0,
                    "tc.ipc.generation": 1,
                }
            )
    return True


@mutator("meta.v1_keys", 3, 0.7)
def _meta_v1_keys(ctx: Ctx) -> bool:
    """Version 1's keys beside the header: a stray ``tc.version`` (a reader refuses the message
    whatever it and the header say), a stray ``tc.transport`` (the other transport's name or
    another), or both with the header in version 1's form (no `version` and `transport` members:
    the message a version-1 sender writes)."""
    m, rng = ctx.metadata, ctx.rng
    if type(m) is not dict:
        return False
    op = rng.randrange(3)
    if op == 0:
        m["tc.version"] = rng.choice(_V1_VERSIONS)
    elif op == 1:
        m["tc.transport"] = _metadata_value(rng, "tc.transport", m.get("tc.transport"))
        if rng.random() < 0.5:
            m["tc.version"] = rng.choice(_V1_VERSIONS)
    else:
        h = HeaderText.parse(ctx.header_text())
        transport = "host"
        if h is not None and type(h.tree) is dict:
            h.tree.pop("version", None)
            transport = hd.transport_of(h.tree)
            h.tree.pop("transport", None)
            m["tc.header"] = h.dumps(rng)
        m["tc.version"], m["tc.transport"] = 1, transport
    return True


@mutator("meta.not_a_dict", 3, 0.3)
def _meta_not_a_dict(ctx: Ctx) -> bool:
    m, rng = ctx.metadata, ctx.rng
    ctx.metadata = rng.choice(
        [None, [], "tc.header", "tc.version", 1, list(m.items()) if type(m) is dict else [], (1, 2), b"meta"]
    )
    return True


# ------------------------------------------------------------------------------------------------
# phase 4: the Arrow value


def _bytes(ctx: Ctx) -> bytes | None:
    return logical_bytes(ctx.value)


@mutator("value.truncate", 4, 1)
def _value_truncate(ctx: Ctx) -> bool:
    b = _bytes(ctx)
    if not b:
        return False
    ctx.value = uint8_recipe(b[: ctx.rng.choice([0, len(b) - 1, ctx.rng.randrange(len(b))])])
    return True


@mutator("value.extend", 4, 1)
def _value_extend(ctx: Ctx) -> bool:
    b = _bytes(ctx)
    if b is None:
        return False
    ctx.value = uint8_recipe(b + ctx.rng.randbytes(ctx.rng.choice([1, 7, 63, 64, 65, 4096])))
    return True


@mutator("value.bit_flip", 4, 2)
def _value_bit_flip(ctx: Ctx) -> bool:
    b, rng = _bytes(ctx), ctx.rng
    if not b:
        return False
    raw = bytearray(b)
    for _ in range(rng.randrange(1, 9)):
        i = rng.randrange(len(raw))
        raw[i] = raw[i] ^ (1 << rng.randrange(8)) if rng.random() < 0.7 else rng.randrange(256)
    ctx.value = dict(ctx.value, data=bytes(ctx.value["data"][: ctx.value["offset"]]) + bytes(raw))
    return True


def _leaves_now(ctx: Ctx) -> list[dict]:
    h = HeaderText.parse(ctx.header_text())
    return hd.leaf_table(h.tree) if h else []


@mutator("value.bool_bytes", 4, 1.5)
def _value_bool_bytes(ctx: Ctx) -> bool:
    """A byte of a bool tensor set to something else than 0/1 (or flipped between them)."""
    b, rng = _bytes(ctx), ctx.rng
    spans = [
        (leaf["offset"], leaf["nbytes"])
        for leaf in _leaves_now(ctx)
        if leaf.get("dtype") == "bool"
        and type(leaf.get("offset")) is int
        and type(leaf.get("nbytes")) is int
        and leaf["nbytes"] > 0
    ]
    spans = [(o, n) for o, n in spans if b is not None and 0 <= o < len(b)]
    if not spans:
        return False
    o, n = rng.choice(spans)
    raw = bytearray(b)
    i = min(len(raw) - 1, o + rng.randrange(n))
    raw[i] = rng.choice([2, 3, 0x80, 0xFF, 0xFE, raw[i] ^ 1, raw[i] ^ 1])
    ctx.value = uint8_recipe(bytes(raw))
    return True


@mutator("value.padding", 4, 0.7)
def _value_padding(ctx: Ctx) -> bool:
    b, rng = _bytes(ctx), ctx.rng
    leaves = _leaves_now(ctx)
    gaps = []
    for l1, l2 in zip(leaves, leaves[1:]):
        start, end, n = l1.get("offset"), l2.get("offset"), l1.get("nbytes")
        if type(start) is int and type(end) is int and type(n) is int and 0 <= start + n < end <= start + n + 4096:
            gaps.extend(range(start + n, end))
    gaps = [g for g in gaps if b is not None and 0 <= g < len(b)]
    if not gaps:
        return False
    raw = bytearray(b)
    raw[rng.choice(gaps)] = rng.randrange(1, 256)
    ctx.value = uint8_recipe(bytes(raw))
    return True


@mutator("value.slice", 4, 1)
def _value_slice(ctx: Ctx) -> bool:
    """The same bytes as a slice (non-zero Arrow offset) of a longer array."""
    b, rng = _bytes(ctx), ctx.rng
    if b is None:
        return False
    k = rng.choice([1, 3, 8, 63, 64, 65, 128, rng.randrange(1, 300)])
    ctx.value = dict(ctx.value, data=rng.randbytes(k) + b, offset=k)
    if ctx.value["validity"] is not None:  # a bitmap for the longer array: all valid
        ctx.value.update(validity=b"\xff" * ((k + len(b) + 7) // 8 + 1), null_count=rng.choice([0, -1]))
    return True


@mutator("value.misalign", 4, 1)
def _value_misalign(ctx: Ctx) -> bool:
    if ctx.value["kind"] != "uint8":
        return False
    ctx.value = dict(ctx.value, misalign=ctx.rng.choice([1, 2, 4, 8, 16, 32, 63]))
    return True


@mutator("value.validity", 4, 1)
def _value_validity(ctx: Ctx) -> bool:
    """A validity bitmap: all valid (null_count 0), or some nulls."""
    b, rng = _bytes(ctx), ctx.rng
    if b is None or ctx.value["offset"]:
        return False
    n = len(b)
    bitmap = bytearray(b"\xff" * ((n + 7) // 8 + 1))
    null_count = 0
    if n and rng.random() < 0.6:
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(n)
            if bitmap[i // 8] & (1 << (i % 8)):
                bitmap[i // 8] &= ~(1 << (i % 8))
                null_count += 1
    ctx.value = dict(ctx.value, validity=bytes(bitmap), null_count=null_count if rng.random() < 0.8 else -1)
    return True


def _items_for(type_name: str, b: bytes, rng: random.Random) -> list:
    if type_name in ("uint8", "int8", "uint16", "int32", "int64", "uint64"):
        items: list = [x - 128 for x in b] if type_name == "int8" else list(b)
        for _ in range(rng.choice([0, 0, 1, 3])):  # some nulls
            if items:
                items[rng.randrange(len(items))] = None
        return items
    if type_name in ("float32", "float64"):
        return [float(x) for x in b]
    if type_name == "bool":
        return [bool(x & 1) for x in b]
    if type_name in ("string", "large_string"):
        return [chr(0x20 + x % 90) * (x % 3) for x in b]
    if type_name in ("binary", "large_binary"):
        return [b[i : i + 3] for i in range(0, len(b), 3)]
    if type_name == "fixed_binary1":
        return [bytes([x]) for x in b]
    if type_name in ("list_uint8", "large_list_uint8"):
        return [list(b[i : i + 4]) for i in range(0, len(b), 4)]
    if type_name == "struct":
        return [{"a": x} for x in b]
    return [None] * len(b)


@mutator("value.arrow_type", 4, 2)
def _value_arrow_type(ctx: Ctx) -> bool:
    """The bytes as another Arrow type (same length, another length, or a slice)."""
    b, rng = _bytes(ctx), ctx.rng
    if b is None:
        return False
    type_name = rng.choice(sorted(ARROW_TYPES))
    if len(b) > 16384:
        b = b[:16384]
    if type_name in ("uint16", "int32", "int64", "uint64", "float32", "float64") and rng.random() < 0.5:
        b = b[: len(b) // {"uint16": 2, "int32": 4, "float32": 4}.get(type_name, 8)]  # same byte count
    items = _items_for(type_name, b, rng)  # uint8 items: the same bytes, some of them null
    sl = None
    if items and rng.random() < 0.3:
        start = rng.randrange(len(items))
        sl = [start, rng.randrange(len(items) - start + 1)]
    ctx.value = {"kind": "arrow", "type": type_name, "items": items, "slice": sl}
    return True


@mutator("value.chunked", 4, 0.7)
def _value_chunked(ctx: Ctx) -> bool:
    b, rng = _bytes(ctx), ctx.rng
    if b is None:
        return False
    cut = rng.randrange(len(b) + 1)
    chunks = [uint8_recipe(b[:cut]), uint8_recipe(b[cut:])][: rng.choice([1, 2])]
    ctx.value = {"kind": "chunked", "chunks": chunks}
    return True


@mutator("value.foreign", 4, 1)
def _value_foreign(ctx: Ctx) -> bool:
    """Not an Arrow array: bytes, numpy, torch, an Arrow buffer, None, a number, a list."""
    b, rng = _bytes(ctx) or b"", ctx.rng
    kind = rng.choice(["py", "py", "numpy", "torch", "buffer"])
    if kind == "py":
        ctx.value = {
            "kind": "py",
            "value": rng.choice([None, b, bytearray(b), 0, len(b), "bytes", list(b[:64]), {"data": b[:8]}, 1.5]),
        }
    else:
        ctx.value = {"kind": kind, "data": b[:65536]}
    return True


@mutator("value.empty", 4, 0.5)
def _value_empty(ctx: Ctx) -> bool:
    ctx.value = (
        uint8_recipe(b"")
        if ctx.rng.random() < 0.7
        else {"kind": "arrow", "type": "null", "items": [None] * ctx.rng.choice([0, 1, 64]), "slice": None}
    )
    return True


# ------------------------------------------------------------------------------------------------
# the case

_PHASE_WEIGHTS = {1: 0.55, 2: 0.15, 3: 0.12, 4: 0.18}


_POOLS = {
    p: ([m for m in MUTATORS if m.phase == p], [m.weight for m in MUTATORS if m.phase == p]) for p in _PHASE_WEIGHTS
}


def case_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"tc-fuzz/{seed}/{index}")


def _choose_call(rng: random.Random) -> dict:
    r = rng.random()
    call: dict = {
        "api": "decode",
        "copy": False,
        "device": None,
        "scope": False,
        "name": None,
        "keep": rng.random() < 0.3,
        "event": None,
    }
    if r < 0.35:
        pass
    elif r < 0.5:
        call["copy"] = True
    elif r < 0.6:
        call["device"] = "cpu"
    elif r < 0.65:
        call.update(device="cpu", copy=True)
    elif r < 0.75:
        call["scope"] = True
    else:
        call["api"] = "receive"
        call["copy"] = rng.random() < 0.3
        call["name"] = rng.choice(["image", "input/with spaces", "\u00e9", ""])
        if rng.random() < 0.1:
            call["event"] = rng.choice(
                [
                    {"type": "STOP"},
                    {"type": None},
                    {"drop": "type"},
                    {"drop": "value"},
                    {"drop": "metadata"},
                    {"not_a_dict": True},
                    {"type": "input"},
                ]
            )
    if rng.random() < 0.05 and call["api"] == "decode":
        call["name"] = "named/input"
    return call


def make_case(seeds: tuple[Seed, ...], seed: int, index: int) -> dict:
    """Case `index` of run `seed`: plain data (see tools/fuzz/encoding.py), same every time."""
    rng = case_rng(seed, index)
    base = seeds[rng.randrange(len(seeds))]
    ctx = Ctx(base, rng)
    applied: list[str] = []
    if rng.random() >= 0.02:  # 2 %: the seed as it is (must decode, or fail as DecodeError for ipc/)
        count = rng.choice([1, 1, 1, 2, 2, 3, 4])
        phases = sorted(rng.choices(list(_PHASE_WEIGHTS), weights=list(_PHASE_WEIGHTS.values()), k=count))
        tree_done = False
        for phase in phases:
            if phase > 1 and not tree_done:
                _finish_tree(ctx, applied)
                tree_done = True
            pool, weights = _POOLS[phase]
            for _ in range(4):  # a mutator with nothing to work on (no namedtuple...): another one
                m = rng.choices(pool, weights=weights)[0]
                if m.fn(ctx):
                    applied.append(m.name)
                    break
        if not tree_done:
            _finish_tree(ctx, applied)
    return {
        "seed_message": base.name,
        "mutators": applied,
        "metadata": ctx.metadata,
        "value": ctx.value,
        "call": _choose_call(rng),
    }
