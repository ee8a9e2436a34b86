"""The caller's metadata of a message sent through dora: a dict whose keys are neither the
codec's (``tc.``) nor dora's image keys, in text UTF-8 can carry (dora's are Rust strings). Its
values are left to dora (docs/transports.md, "A stream's prepared sends"): `unencodable` names one it refused."""

from __future__ import annotations

from typing import Any

from ..errors import EncodeError, some_keys
from ..wire.header import RESERVED_PREFIX
from ..wire.header_json import describe_surrogate, lone_surrogate

__all__ = ["keys_pass", "refuse", "unencodable"]

# dora's image convention (flat uint8 bytes described by these keys): a dora-hub node takes any
# message carrying them as such an image, so tc.send refuses them (tc.send_plain is for that).
DORA_IMAGE_KEYS = ("encoding", "width", "height")
_NO_TEXT = frozenset({int, float, bool, type(None)})


def keys_pass(keys: tuple) -> bool:
    """Whether every key is text UTF-8 carries, not reserved and not one of dora's image keys."""
    return all(
        type(key) is str
        and not key.startswith(RESERVED_PREFIX)
        and key not in DORA_IMAGE_KEYS
        and (key.isascii() or not lone_surrogate(key))
        for key in keys
    )


def refuse(metadata: Any) -> None:
    """Raise EncodeError for what is wrong in the caller's metadata (in this order: not a dict,
    reserved keys, text UTF-8 cannot carry, dora's image keys), if anything is."""
    if not isinstance(metadata, dict):
        raise EncodeError(f"metadata: expected a dict (or None), got {type(metadata).__name__}")
    reserved = [k for k in metadata if isinstance(k, str) and k.startswith(RESERVED_PREFIX)]
    if reserved:
        raise EncodeError(
            f"metadata: keys starting with {RESERVED_PREFIX!r:.80} are reserved for the codec, got "
            f"{some_keys(reserved)}: forwarding a received message's metadata? tc.carry(event['metadata']) keeps "
            "what travels on with a new message (not the codec's keys, nor those that described the input)"
        )
    for key, value in metadata.items():
        ascii_value = type(value) in _NO_TEXT or (type(value) is str and value.isascii())
        if not (ascii_value and type(key) is str and key.isascii()):
            _refuse_surrogates(key, value)  # only non-ASCII text (or text in a list) can hold one
    image_keys = [k for k in DORA_IMAGE_KEYS if k in metadata]
    if image_keys:
        raise EncodeError(
            f"metadata.{image_keys[0]}: dora's image key, which says the value is flat image bytes; a tensor_codec "
            "message is not, and dora-hub image nodes would read its bytes as pixels, scrambled. Send flat bytes "
            "with tc.send_plain, or name the pixel format under another key (the nodes use `pixel_format`); "
            "forwarding a received message's metadata? tc.carry(event['metadata']) drops these keys"
        )


def _refuse_surrogates(key: Any, value: Any) -> None:
    values = value if isinstance(value, (list, tuple)) else (value,)
    for text, what in [(key, "key"), *((v, "value") for v in values)]:
        found = lone_surrogate(text) if isinstance(text, str) else None
        if found:
            raise EncodeError(
                f"metadata[{key!r:.80}]: expected a {what} UTF-8 can carry, got {describe_surrogate(text, found)}"
            )


def unencodable(metadata: dict | None, error: UnicodeEncodeError) -> EncodeError | UnicodeEncodeError:
    """What to raise when dora refused `metadata`'s text: the field named, or dora's own error
    where the caller's metadata holds no such text."""
    try:
        refuse(metadata or {})
    except EncodeError as named:
        return named
    return error
