"""Tensor kinds (docs/wire-format.md, section 3): plain tensors and each torchvision TVTensor
class, with a stable wire tag (never ``str(type(x))``) and its attributes, to JSON and back
(validating what arrives).

torchvision is optional: without it only plain tensors are known, and a TVTensor is refused by
name. It is imported the first time a TVTensor is met (sent, or named by a received header),
not with this module: importing it costs a process about 1.3 s of CPU (its ops pull in
torch._dynamo), which every node of plain tensors would pay at start for nothing.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

from ..errors import DecodeError, EncodeError, Where

__all__ = [
    "TensorKind",
    "PLAIN",
    "kind_of",
    "kind_by_tag",
    "handed_out_as",
    "retypes_in_place",
    "MAKE_SUBCLASS",
    "TV_ATTRIBUTES",
]

_MAX_CANVAS = 1 << 31
TV_ATTRIBUTES = ("format", "canvas_size", "clamping_mode")  # every attribute a TVTensor kind carries


class TensorKind:
    """A plain tensor: no attributes."""

    tag = "tensor"
    cls: type = torch.Tensor
    attribute_names: tuple[str, ...] = ()
    optional_attribute_names: tuple[str, ...] = ()  # tolerated when missing

    @functools.cached_property
    def node_keys(self) -> frozenset:
        """Keys a tree node of this kind may carry."""
        return frozenset({"t", "leaf", "grad", *self.attribute_names, *self.optional_attribute_names})

    @functools.cached_property
    def required_node_keys(self) -> frozenset:
        return frozenset({"t", "leaf", *self.attribute_names})

    def attributes(self, x: torch.Tensor) -> dict[str, Any]:
        """Attributes of `x` as JSON values, in a fixed order."""
        return {}

    def attribute_key(self, x: torch.Tensor) -> tuple:
        """The attribute values of `x`, hashable, for caching what depends on them."""
        return ()

    def parse_attributes(self, node: dict, where: str) -> dict[str, Any]:
        """Validate the attributes a received node carries; return them as Python values."""
        return {}

    def wrap(self, plain: torch.Tensor, attrs: dict[str, Any], owned: bool = False) -> torch.Tensor:
        """The object of a received node over its leaf `plain` (`owned`: see `handed_out_as`)."""
        return plain

    def wrap_like(self, plain: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """Rebuild `plain` with the class and attributes of `like` (used by structure maps)."""
        return plain


# (cls, plain, requires_grad) -> `plain` as a `cls`, a second tensor object: `handed_out_as`'s
# one call (a received one-tensor message's class is set in place instead: `retypes_in_place`).
# Untyped: torch's stub takes no TVTensor class.
MAKE_SUBCLASS: Any = torch.Tensor._make_subclass


@functools.cache
def retypes_in_place(cls: type) -> bool:
    """Whether a tensor torch made (DLPack's view of a message) can be handed out as a `cls` by
    setting its ``__class__``, instead of a second tensor object made over it (`handed_out_as`),
    which cost three times the rest of tc's receive (docs/transports.md, "Host bytes through
    dora"). Yes for a subclass without a ``__torch_dispatch__`` of its own (torch sets up such a
    class's dispatch when it makes the object, which an assignment skips; TVTensors have none)
    whose objects Python lets a tensor become (the same memory layout: tried here, once per class)."""
    if not (isinstance(cls, type) and issubclass(cls, torch.Tensor)) or cls is torch.Tensor:
        return False
    if getattr(cls, "__torch_dispatch__", None) is not getattr(torch.Tensor, "__torch_dispatch__", None):
        return False
    probe = torch.empty(0)
    try:
        probe.__class__ = cls
    except TypeError:  # a layout Python will not swap (slots, another base)
        return False
    return type(probe) is cls


def handed_out_as(plain: torch.Tensor, cls: type, owned: bool = False) -> Any:
    """`plain` as an instance of `cls`, sharing its storage, version counter and autograd flag:
    any shape the sender had (the class's constructor would add dims to a 2-D Image or refuse a
    batched BoundingBoxes), and no copy. Not ``as_subclass``: its result is an autograd view of
    `plain` (``_base``), and a received leaf must view nothing that releasing it leaves behind
    (tensor_codec/lifetimes.py empties the handed-out tensor only: a `_base` kept the message's
    memory, dora's shared memory, alive).

    `owned`: nothing else holds or tracks `plain` (a decode's copied leaf), so `plain` itself
    becomes the instance where the class allows (`retypes_in_place`; what it saves: transports.md)."""
    if owned and retypes_in_place(cls):
        plain.__class__ = cls
        return plain
    return MAKE_SUBCLASS(cls, plain, plain.requires_grad)


class _PlainSubclassKind(TensorKind):
    """A TVTensor class, tagged ``tv.`` and its name; as it stands, one without attributes:
    Image, Video, Mask."""

    def __init__(self, cls: type):
        self.cls = cls
        self.tag = f"tv.{cls.__name__}"

    def wrap(self, plain, attrs, owned=False):
        return handed_out_as(plain, self.cls, owned)

    def wrap_like(self, plain, like):
        if not self.attribute_names:
            return plain.as_subclass(self.cls)
        # Not tv_tensors.wrap: it checks the shape, and a TVTensor of any shape can be sent and
        # received (the decoder rebuilds it this way too).
        names = [*self.attribute_names, *(n for n in self.optional_attribute_names if hasattr(like, n))]
        return self.wrap(plain, {name: getattr(like, name) for name in names})


def _attribute(x, name: str):
    """A TVTensor attribute the codec must send; one made with as_subclass may lack it."""
    try:
        return getattr(x, name)
    except AttributeError:
        raise EncodeError(
            f"unsupported {type(x).__name__}: expected its `{name}` attribute, got none "
            f"(made with .as_subclass()? build it with the torchvision class or set .{name})"
        ) from None


def _canvas_to_json(value) -> list[int]:
    return [int(value[0]), int(value[1])]


def _parse_canvas(node: dict, where: str) -> tuple[int, int]:
    value = node.get("canvas_size")
    if type(value) is list and len(value) == 2:
        h, w = value
        if type(h) is int and type(w) is int and 0 <= h < _MAX_CANVAS and 0 <= w < _MAX_CANVAS:
            return (h, w)
    raise DecodeError(f"{where}.canvas_size: expected [height, width] as two integers in [0, 2**31), got {value!r:.80}")


class _BoundingBoxesKind(_PlainSubclassKind):
    attribute_names = ("format", "canvas_size")
    optional_attribute_names = ("clamping_mode",)

    def __init__(self, cls: type, formats: Any):
        super().__init__(cls)
        self.formats = {m.name: m for m in formats}

    def attribute_key(self, x):
        fmt = _attribute(x, "format")
        # The format's name, not the member: an Enum hashes in Python (a per-message cost).
        return (getattr(fmt, "_name_", fmt), tuple(_attribute(x, "canvas_size")), getattr(x, "clamping_mode", None))

    def attributes(self, x):
        attrs = {"format": _attribute(x, "format").name, "canvas_size": _canvas_to_json(_attribute(x, "canvas_size"))}
        # A BoundingBoxes made with as_subclass may lack it: torchvision's default then.
        attrs["clamping_mode"] = getattr(x, "clamping_mode", "soft")
        return attrs

    def parse_attributes(self, node, where):
        fmt = node.get("format")
        if type(fmt) is not str or fmt not in self.formats:
            raise DecodeError(f"{where}.format: expected one of {sorted(self.formats)}, got {fmt!r:.80}")
        attrs = {"format": self.formats[fmt], "canvas_size": _parse_canvas(node, where)}
        if "clamping_mode" in node:
            mode = node["clamping_mode"]
            if mode not in (None, "soft", "hard"):
                raise DecodeError(f"{where}.clamping_mode: expected 'soft', 'hard' or null, got {mode!r:.80}")
            attrs["clamping_mode"] = mode
        return attrs

    def wrap(self, plain, attrs, owned=False):
        out = handed_out_as(plain, self.cls, owned)
        out.format = attrs["format"]
        out.canvas_size = attrs["canvas_size"]
        # A sender whose torchvision predates clamping_mode (0.23) gets torchvision's default.
        out.clamping_mode = attrs.get("clamping_mode", "soft")
        return out


class _KeyPointsKind(_PlainSubclassKind):
    attribute_names = ("canvas_size",)

    def attribute_key(self, x):
        return (tuple(_attribute(x, "canvas_size")),)

    def attributes(self, x):
        return {"canvas_size": _canvas_to_json(_attribute(x, "canvas_size"))}

    def parse_attributes(self, node, where):
        return {"canvas_size": _parse_canvas(node, where)}

    def wrap(self, plain, attrs, owned=False):
        out = handed_out_as(plain, self.cls, owned)
        out.canvas_size = attrs["canvas_size"]
        return out


PLAIN = TensorKind()  # a plain torch.Tensor
# The kinds known so far, each under its class (`kind_of`) and its tag (`kind_by_tag`): a class is
# never a str, so the two never meet. The TVTensor kinds join once, when torchvision is first needed.
_KINDS: dict[type | str, TensorKind] = {torch.Tensor: PLAIN, PLAIN.tag: PLAIN}
# Tags this build may meet from a peer with a newer torchvision, for a precise error.
_KNOWN_TV_TAGS = frozenset({"tv.Image", "tv.Video", "tv.Mask", "tv.BoundingBoxes", "tv.KeyPoints"})
_tv_looked_for = False
_tv_lock = threading.Lock()


def _add_tvtensor_kinds() -> None:
    """Import torchvision (once) and add a kind for each TVTensor class it has (none without it)."""
    global _tv_looked_for
    with _tv_lock:
        if _tv_looked_for:
            return
        try:
            from torchvision import tv_tensors as tvt
        except ImportError:
            tvt = None
        if tvt is not None:
            # Every class and attribute here is in every torchvision the package accepts (versions.py).
            added: list[TensorKind] = [_PlainSubclassKind(getattr(tvt, name)) for name in ("Image", "Video", "Mask")]
            added += [_BoundingBoxesKind(tvt.BoundingBoxes, tvt.BoundingBoxFormat), _KeyPointsKind(tvt.KeyPoints)]
            for kind in added:  # readers never see a half-added kind: each dict entry is whole
                _KINDS[kind.cls] = kind
                _KINDS[kind.tag] = kind
        _tv_looked_for = True


def kind_of(x: object) -> TensorKind | None:
    """The kind of `x` by exact type (a subclass is a different type and is not accepted)."""
    kind = _KINDS.get(type(x))
    if kind is None and not _tv_looked_for and type(x).__module__.startswith("torchvision.tv_tensors"):
        _add_tvtensor_kinds()  # an instance of a TVTensor: torchvision is imported already
        kind = _KINDS.get(type(x))
    return kind


def kind_by_tag(tag: str, where: str | Where) -> TensorKind | None:
    """The kind a received tree node's tag names (torchvision imported for a TVTensor tag), None
    for a tag that is no tensor kind."""
    kind = _KINDS.get(tag)
    if kind is None and tag in _KNOWN_TV_TAGS:
        if not _tv_looked_for:
            _add_tvtensor_kinds()
            kind = _KINDS.get(tag)
        if kind is None:
            raise DecodeError(f"{where}.t: {tag!r} needs a torchvision that provides it; this process has none")
    return kind
