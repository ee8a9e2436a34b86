"""The caller's own metadata keys beside the codec's (README.md's example uses both and says what
goes wrong without them): `stamp` writes what makes a message verifiable and timeable, `carry`
keeps what travels on from a received message to the one a node makes from it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .digest import content_digest
from .errors import EncodeError
from .wire.header import RESERVED_PREFIX

__all__ = ["CHECKSUM", "SENT_NS", "DESCRIBES_INPUT", "stamp", "carry"]

CHECKSUM = "checksum"  # the content digest of the whole object (digest.py), "crc32:xxxxxxxx"
SENT_NS = "sent_ns"  # wall clock (time.time_ns) just before the send: the receiver times the hop from it

# Keys that say what one message's content is, or how one link delivers it: true of the message
# they came with, false of anything made from it. dora's image keys say the value is flat image
# bytes; the rest are the project's node protocol (nodes/common/protocol.py names each).
DESCRIBES_INPUT = frozenset(
    {
        CHECKSUM,
        SENT_NS,
        "encoding",  # dora's image keys
        "width",
        "height",
        "pixel_format",  # a frame's channels, and the synthetic pattern it shows
        "pattern",
        "pattern_size",
        "lossy",  # a frame decoded from a JPEG
        "quality",  # a JPEG's own facts
        "channels",
        "jpeg_crc32",
        "subsampling",
        "case",  # what a test payload is, and that it must be refused
        "expect",
        "wants_ack",  # per-link delivery: the hop that asked acknowledges
        "tx",
    }
)


def stamp(obj: Any, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`metadata` (a copy) with `checksum` (the content digest of `obj`) and `sent_ns` (now) set:
    a receiver can then verify what it restored and time the hop. Call it right before
    `tc.send(node, output, obj, tc.stamp(obj, metadata))`; the digest reads every tensor's
    logical bytes once (CUDA tensors are copied to the host for it: keep it off a hot GPU path).
    Raises EncodeError for what the codec cannot send."""
    out = dict(_checked(metadata))
    out[CHECKSUM] = content_digest(obj)
    out[SENT_NS] = time.time_ns()
    return out


def carry(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keys of a received message's metadata that travel on with an object made from it: all
    but the codec's own (`tc.*`) and those that described the input (`DESCRIBES_INPUT`). Pass the
    result (with `stamp` on top, if the receiver should verify it) to `tc.send`."""
    return {
        k: v
        for k, v in _checked(metadata).items()
        if not (isinstance(k, str) and k.startswith(RESERVED_PREFIX)) and k not in DESCRIBES_INPUT
    }


def _checked(metadata: Any) -> Mapping[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise EncodeError(f"metadata: expected a dict (or None), got {type(metadata).__name__}")
    return metadata
