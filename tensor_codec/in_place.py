"""Most messages in one step: a message whose header was seen before and whose object is one
tensor (plain, or an attribute-less Image, Video or Mask), its host bytes viewed where dora put
them, zero-copy and registered (lifetimes.py).

A stream sends such messages one after another, and between two of them a dora node waits in
dora's event loop, so every step of a receive runs with the CPU's caches cold: each Python call
then costs a microsecond or two, and reading a NamedTuple's fields one by one more than unpacking
a plain tuple once. So the receive of such a message is this one function (and the registration),
over what its header fixed, unpacked from one tuple (`received.Compiled.in_place`, the host
transport's `in_place_layout` with the class and the tree). A 1 MB float32 message in a dora node
took 11 to 13 us longer to a usable tensor this way than the `torch.from_dlpack(value)` and two
views a user writes, against 25 to 26 us longer through the calls this replaces (five Python
frames more: decode, the header key's read, the cache, the transport's former viewer closure,
DLPack's negotiation); bench/dora_latency.py --split, 2000 messages per contender, three runs of each
tree alternating, 2026-11-28.

Anything else returns None, and `codec.decode_in_full` takes the message, naming what is wrong: a
header not seen before (or not a string, or beside version 1's key), a tree, a value that is not
exactly the bytes the header describes, bytes not aligned for a view (copied there). The caller
asks for no copy and no device.
"""

from __future__ import annotations

from typing import Any

from . import lifetimes, received
from .transports.arrow_values import DLPACK_VERSION, FROM_CAPSULE, VERSIONED_CAPSULES
from .wire.buffer import HOST_ALIGNMENT, UNITS
from .wire.header import KEY_HEADER, V1_KEY_VERSION

__all__ = ["view_in_place"]

_lookup = received.lookup


def view_in_place(value: Any, metadata: Any, name: str | None) -> Any:
    """The object of one message of a seen one-tensor header, viewing `value` and registered
    under `name` (an input id, for errors), or None: see the module's doc."""
    if type(metadata) is not dict:
        return None
    text = metadata.get(KEY_HEADER)
    if type(text) is not str:  # (an unhashable value would not even look up)
        return None
    hit = _lookup(text)
    if hit is None:
        return None
    layout = hit[0].in_place
    if layout is None or V1_KEY_VERSION in metadata:
        return None
    total, dtype, shape, strides, retype, leaves, tree = layout
    width = UNITS.get(type(value), 0)  # the class gives the Arrow type (wire.buffer.check_value)
    if not width or len(value) * width != total or value.null_count:
        return None
    # DLPack's view of the value (arrow_values.view_of, inlined): its storage keeps the Arrow
    # buffer alive; it starts at the value's first byte.
    if VERSIONED_CAPSULES:
        leaf = FROM_CAPSULE(value.__dlpack__(max_version=DLPACK_VERSION))
    else:
        leaf = FROM_CAPSULE(value.__dlpack__())
    if leaf.data_ptr() % HOST_ALIGNMENT:
        return None  # copied into aligned memory by the full path
    if leaf.dtype is dtype:  # the value is typed as the leaf (tc.send)
        leaf.as_strided_(shape, strides)  # in bounds: the header was checked
        borrowed = value  # keep() copies the value itself
    else:
        # The bytes retyped (send_output_raw's UInt8, or the unit that tiles a dtype Arrow lacks):
        # a dtype view is no autograd view (no `_base`), so a released leaf keeps nothing of the
        # message alive; two torch calls, where a new tensor set onto the storage takes three.
        try:
            retyped = leaf.view(dtype)
        except RuntimeError:  # a view torch will not make: the full way (leaf_views) instead
            return None
        borrowed, leaf = leaf, retyped.as_strided_(shape, strides)
    version = leaf._version  # read while plain: an Image's reads go through its __torch_function__
    if retype is not None:
        # The tensor itself becomes the Image (Video, Mask): no second tensor object over it
        # (wire.kinds.retypes_in_place, checked when the header was compiled).
        leaf.__class__ = retype
    lifetimes.register_leaf(name, leaf, version, borrowed, leaves, tree)
    return leaf
