"""What a tensor_codec message is, from its metadata alone: the object's structure (types, dict
keys, dtypes, shapes, TVTensor attributes), its transport and the bytes it carries, without
decoding a tensor or reading a data byte (a monitor, a log line, a debugger).

The metadata is hostile input, validated by decode's own code and kept in decode's cache
(received.compile_header). A namedtuple is described by the name its header gives, never
imported. With `value`, what decode checks of the value without reading its bytes is checked too
(docs/wire-format.md, sections 5 and 5a); what only the bytes show (zero padding, bool bytes) is
decode's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import received
from .errors import UsageError
from .transports import transport_for_message
from .transports.names import HOST
from .wire.buffer import check_value
from .wire.cuda_ipc import check_empty_value, parse_ipc_fields
from .wire.header import ReceivedLeaf, read_metadata
from .wire.structure import DICT, LIST, NAMEDTUPLE, PACKED_FIELDS, TUPLE

__all__ = ["Description", "describe", "message_transport", "MAX_CHARS"]

MAX_CHARS = 4000  # the most `max_chars` may ask for
_MAX_SCALAR = 24  # characters of a string (or other scalar) shown
_DESCRIPTIONS_PER_HEADER = 8  # the texts kept of one header (of its (width, depth, max_chars))


@dataclass(frozen=True)
class Description:
    """A codec message, described. `structure`: the object as text; `transport`: "host" or
    "cuda-ipc"; `leaves`: its tensors; `nbytes`: the bytes of its message buffer (host: the
    Arrow value's length; CUDA IPC: the GPU memory it refers to, which never travels); `gpu`: the
    UUID of the GPU a CUDA IPC message lives on, or the one a host message is to be restored
    onto (routing's small-message rule), else None."""

    transport: str
    structure: str
    leaves: int
    nbytes: int
    gpu: str | None = None

    def __str__(self) -> str:
        return self.structure


def message_transport(metadata: Any) -> str:
    """The transport a tensor_codec message's header names (``"host"``, ``"cuda-ipc"``), validated
    and cached as decode's (see the module doc). DecodeError for a malformed one."""
    return received.compile_header(read_metadata(metadata), transport_for_message).transport.name


def describe(metadata: Any, value: Any = None, *, width: int = 8, depth: int = 4, max_chars: int = 400) -> Description:
    """`metadata` (and `value`, when given) of one tensor_codec message -> its `Description`.

    `width`: items shown per container (the rest counted: ``... +12 more``); `depth`: container
    levels shown (deeper ones counted: ``{...3 items}``); `max_chars`: the most characters of
    `structure` (cut with ``...``). DecodeError for a malformed or inconsistent message."""
    _check_bounds(width, depth, max_chars)
    compiled = received.compile_header(read_metadata(metadata), transport_for_message)
    prepared, transport_name = compiled.prepared, compiled.transport.name
    total = prepared[1]  # every transport's prepared layout: (offsets, total length, ...)
    if transport_name == HOST:
        gpu = prepared[4]
        if value is not None:
            check_value(value, total)
    else:
        gpu = prepared[2].gpu
        if value is not None:
            check_empty_value(value)
            parse_ipc_fields(metadata, total)
    structure = _structure(compiled, width, depth, max_chars)
    return Description(transport_name, structure, len(compiled.leaves), total, gpu)


def _structure(compiled: received.Compiled, width: int, depth: int, max_chars: int) -> str:
    """The object of `compiled` as text, kept on it: a stream repeats its header."""
    key = (width, depth, max_chars)
    descriptions = compiled.descriptions
    structure = descriptions.get(key)
    if structure is None:
        pieces = _Writer(compiled.leaves, width, depth).node(compiled.header["tree"], 0)
        structure = _bounded(pieces, max_chars)
        if len(descriptions) >= _DESCRIPTIONS_PER_HEADER:
            descriptions.clear()
        descriptions[key] = structure
    return structure


def _check_bounds(width: Any, depth: Any, max_chars: Any) -> None:
    for name, v, low, high in (
        ("width", width, 1, 1024),
        ("depth", depth, 0, 64),
        ("max_chars", max_chars, 16, MAX_CHARS),
    ):
        if type(v) is not int or not low <= v <= high:
            raise UsageError(f"describe: {name}: expected an integer {low}..{high}, got {v!r:.80}")


def _bounded(pieces: Iterator[str], max_chars: int) -> str:
    """The pieces joined, cut with ``...`` to `max_chars` characters: the pieces past them are
    never made."""
    parts: list[str] = []
    length = 0
    for piece in pieces:
        parts.append(piece)
        length += len(piece)
        if length > max_chars:
            return "".join(parts)[: max_chars - 3] + "..."
    return "".join(parts)


class _Writer:
    """A validated tree (compile_tree accepted it) as pieces of text, each made when it is read."""

    def __init__(self, leaves: list[ReceivedLeaf], width: int, depth: int):
        self.leaves = leaves
        self.width = width
        self.depth = depth

    def node(self, node: Any, level: int) -> Iterator[str]:
        if type(node) is not dict:
            yield _scalar(node)
            return
        tag = node["t"]
        if "leaf" in node:
            yield self.tensor(node)
        elif tag == "float":
            yield node["v"]
        elif tag == DICT:
            yield from self.items("{", "}", node["items"], level, lambda pair: (_key(pair[0]) + ": ", pair[1]))
        elif tag == LIST:
            yield from self.items("[", "]", node["items"], level, lambda item: ("", item))
        elif tag == TUPLE:
            closing = ",)" if len(node["items"]) == 1 else ")"
            yield from self.items("(", closing, node["items"], level, lambda item: ("", item))
        elif tag == NAMEDTUPLE:
            name = _short(node["name"].rsplit(".", 1)[-1])
            pairs = list(zip(node["fields"], node["items"]))
            yield from self.items(f"{name}(", ")", pairs, level, lambda pair: (pair[0] + "=", pair[1]))
        else:  # a PackedSequence: compile_tree accepts no other tag
            present = [(f, node[f]) for f in PACKED_FIELDS if node[f] is not None]
            yield from self.items("PackedSequence(", ")", present, level, lambda pair: (pair[0] + "=", pair[1]))

    def items(self, opening: str, closing: str, items: list, level: int, split) -> Iterator[str]:
        if level >= self.depth and items:
            yield f"{opening}...{len(items)} item{'s' if len(items) != 1 else ''}{closing}"
            return
        yield opening
        for i, item in enumerate(items[: self.width]):
            if i:
                yield ", "
            label, child = split(item)
            yield label
            yield from self.node(child, level + 1)
        if len(items) > self.width:
            yield f", ... +{len(items) - self.width} more"
        yield closing

    def tensor(self, node: dict) -> str:
        leaf = self.leaves[node["leaf"]]
        kind = node["t"].removeprefix("tv.")
        text = f"{'Tensor' if kind == 'tensor' else kind} {leaf.dtype.name}[{', '.join(map(str, leaf.shape))}]"
        if "format" in node:
            text += f" format={node['format']}"
        if "canvas_size" in node:
            h, w = node["canvas_size"]
            text += f" canvas_size=({h}, {w})"
        if node.get("clamping_mode") not in (None, "soft"):  # torchvision's default is not shown
            text += f" clamping_mode={node['clamping_mode']}"
        if node.get("grad"):
            text += " requires_grad"
        return text


def _short(text: str) -> str:
    """A string from the header, shown: at most _MAX_SCALAR characters, control characters escaped."""
    shown = text[:_MAX_SCALAR]
    if not shown.isprintable():
        shown = repr(shown)[1:-1]
    return shown + ("..." if len(text) > _MAX_SCALAR else "")


def _key(key: Any) -> str:
    if type(key) is str:
        return _short(key) if key.isidentifier() else repr(_short(key))
    return str(key)


def _scalar(value: Any) -> str:
    if type(value) is str:
        return repr(_short(value))
    text = repr(value)  # None, bool, int (int64), float (finite): short already
    return text if len(text) <= _MAX_SCALAR else text[:_MAX_SCALAR] + "..."
