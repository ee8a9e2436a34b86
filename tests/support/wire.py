"""Hand-written messages of wire format 2 for the tests that forge them: a header text written as
the tests write it (`{"leaves":...,"tree":...}`), with the members version 2 puts first, and the
metadata that carries it."""

from __future__ import annotations

import json

from tensor_codec.wire.header import KEY_HEADER, VERSION


def enveloped(text: str, transport: str = "host") -> str:
    """`text` with ``"version":2,"transport":...`` as the first members of its first object; a
    text without one (malformed on purpose) as it is."""
    start = text.find("{") + 1
    if not start:
        return text
    return text[:start] + f'"version":{VERSION},"transport":"{transport}",' + text[start:]


def codec_metadata(text: str, transport: str = "host") -> dict:
    """The metadata of a message whose header is `text` (`enveloped`)."""
    return {KEY_HEADER: enveloped(text, transport)}


def transport_of(metadata: dict) -> str:
    """The transport a message's header names, read as any JSON reader reads it."""
    return json.loads(metadata[KEY_HEADER])["transport"]


def with_transport(metadata: dict, transport: str) -> dict:
    """The message with its header's transport member replaced (other members in their order)."""
    header = json.loads(metadata[KEY_HEADER])
    header["transport"] = transport
    return {**metadata, KEY_HEADER: json.dumps(header, separators=(",", ":"))}
