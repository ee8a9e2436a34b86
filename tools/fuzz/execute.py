"""Run one case in this process: build its value, call the public API, touch what came back, and
classify the outcome.

Outcomes: ``ok`` (decoded, and everything below held), ``DecodeError`` (the decode call refused
the message), ``other:<ExceptionType>`` (anything else raised, at any stage: a finding).

After a successful decode the message must be one the format lets a reader accept
(`Mismatch` otherwise): no version-1 ``tc.version`` key beside the header, a header whose
``version`` member is the int 2 and whose ``transport`` names a transport, with no top-level key
but the envelope's and that transport's. Then every tensor is *touched* so lazy faults show up
here and not later:

* it must be a CPU tensor of the leaf's dtype, shape and strides, of the kind its tree node names,
  in the header's leaf order (`Mismatch` otherwise);
* every element it can address must lie inside its storage (`ViewOutOfBounds` otherwise): the
  span is computed from its own storage offset, sizes and strides, never by densifying it (a
  broadcast tensor of 2^31 elements costs nothing);
* every byte of that span is read (summed), and the first, last and one random element are
  compared byte for byte with what the header says the Arrow value holds there (`Mismatch`);
* every string in the result (dict keys and values) is UTF-8 text that `tc.encode` would take:
  no lone surrogate (`Mismatch`).

Then, as the call asks, ``tc.keep`` copies the result (only when its logical size is at most
`KEEP_MAX_BYTES`: keep densifies tensors that are not zero-copy views) and ``tc.release`` (or
the end of ``tc.scope()``) releases it, so nothing outlives the case.
"""

from __future__ import annotations

import contextlib
import json
import random
import traceback
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import torch

import tensor_codec as tc
from tensor_codec.walk import plain_of

from . import values
from .headers import TRANSPORTS, VERSION, tensor_nodes, top_keys

__all__ = ["Outcome", "run_case", "Mismatch", "ViewOutOfBounds", "KEEP_MAX_BYTES"]

KEEP_MAX_BYTES = 64 << 20
_KIND_CLASS = {
    "tensor": "Tensor",
    "tv.Image": "Image",
    "tv.Video": "Video",
    "tv.Mask": "Mask",
    "tv.BoundingBoxes": "BoundingBoxes",
    "tv.KeyPoints": "KeyPoints",
}


class Mismatch(AssertionError):
    """A decoded object that disagrees with the message it came from."""


class ViewOutOfBounds(AssertionError):
    """A decoded tensor can address bytes outside its storage."""


@dataclass
class Outcome:
    outcome: str  # ok | DecodeError | other:<ExceptionType>
    stage: str = ""  # where an exception came from: build, decode, touch, keep, release
    detail: str = ""  # the exception's message (first 500 characters)
    traceback: str = ""  # for other:* outcomes


def _event(call: dict, value: Any, metadata: Any) -> Any:
    event: Any = {"type": "INPUT", "id": call["name"], "value": value, "metadata": metadata}
    change = call.get("event")
    if change:
        if "type" in change:
            event["type"] = change["type"]
        if "drop" in change:
            event.pop(change["drop"], None)
        if change.get("not_a_dict"):
            event = list(event.items())
    return event


def _decode(call: dict, value: Any, metadata: Any) -> Any:
    kwargs: dict = {"copy": call["copy"]}
    if call["device"] is not None:
        kwargs["device"] = call["device"]
    if call["api"] == "receive":
        return tc.receive(_event(call, value, metadata), **kwargs)
    if call["name"] is not None:
        kwargs["name"] = call["name"]
    return tc.decode(value, metadata, **kwargs)


def _tensors(obj: Any, out: list, depth: int = 0) -> list:
    """Every tensor of a decoded object, depth first (dict values, list / tuple / namedtuple /
    PackedSequence items in order): the header's leaf order."""
    if depth > 1000:
        raise Mismatch("decoded object nested deeper than 1000 levels")
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif type(obj) is dict:
        for v in obj.values():
            _tensors(v, out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors(v, out, depth + 1)
    return out


def _check_strings(obj: Any, depth: int = 0) -> None:
    """Every string a decode returns (dict keys and values) is one `tc.encode` would take: UTF-8
    text, no lone surrogate (which a JSON escape can spell). Type names cannot hold one: Python
    refuses it."""
    if depth > 1000:
        raise Mismatch("decoded object nested deeper than 1000 levels")
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            raise Mismatch(f"decoded string {obj[:40]!r} is not UTF-8 text (a lone surrogate)") from None
    elif type(obj) is dict:
        for k, v in obj.items():
            _check_strings(k, depth + 1)
            _check_strings(v, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _check_strings(v, depth + 1)


# wire-format.md, section 5: any fixed-width integer or float type holds the buffer's bytes.
_UNITS = (
    pa.uint8(),
    pa.int8(),
    pa.uint16(),
    pa.int16(),
    pa.float16(),
    pa.uint32(),
    pa.int32(),
    pa.float32(),
    pa.uint64(),
    pa.int64(),
    pa.float64(),
)


def _value_bytes(value: Any) -> bytes | None:
    if isinstance(value, pa.Array) and value.type in _UNITS and value.null_count == 0:  # the same bytes
        return value.to_numpy(zero_copy_only=False).tobytes() if len(value) else b""
    return None


def _span(plain: torch.Tensor) -> tuple[int, int]:
    """Byte range [lo, hi) of the storage that `plain` can address (numel > 0)."""
    itemsize = plain.element_size()
    lo = plain.storage_offset() * itemsize
    reach = sum((s - 1) * st for s, st in zip(plain.shape, plain.stride()))
    return lo, lo + itemsize * (reach + 1)


def _touch_one(i: int, t: torch.Tensor, leaf: dict, node_tag: str | None, raw: bytes | None, rng: random.Random) -> int:
    plain = plain_of(t)
    where = f"leaf {i}"
    dtype = str(plain.dtype).removeprefix("torch.")
    if dtype != leaf["dtype"] or list(plain.shape) != leaf["shape"] or list(plain.stride()) != leaf["strides"]:
        raise Mismatch(
            f"{where}: got {dtype} {list(plain.shape)} strides {list(plain.stride())}, header says {leaf['dtype']} "
            f"{leaf['shape']} {leaf['strides']}"
        )
    if plain.device.type != "cpu":
        raise Mismatch(f"{where}: on {plain.device}")
    if node_tag is not None and type(t).__name__ != _KIND_CLASS.get(node_tag, "?"):
        raise Mismatch(f"{where}: a {type(t).__name__} for a {node_tag!r} node")
    if plain.numel() == 0:
        return 0
    if any(st < 0 for st in plain.stride()):
        raise ViewOutOfBounds(f"{where}: negative stride {plain.stride()}")
    storage = plain.untyped_storage()
    lo, hi = _span(plain)
    if lo < 0 or hi > storage.nbytes():
        raise ViewOutOfBounds(f"{where}: addresses bytes [{lo}, {hi}) of a storage of {storage.nbytes()}")
    whole = torch.empty(0, dtype=torch.uint8).set_(storage)
    total = int(whole[lo:hi].sum(dtype=torch.int64))
    if raw is not None:
        itemsize = plain.element_size()
        picks = [[0] * plain.dim(), [s - 1 for s in plain.shape], [rng.randrange(s) for s in plain.shape]]
        for idx in picks:
            got_at = lo + itemsize * sum(a * st for a, st in zip(idx, plain.stride()))
            want_at = leaf["offset"] + itemsize * sum(a * st for a, st in zip(idx, leaf["strides"]))
            got = bytes(whole[got_at : got_at + itemsize].tolist())
            want = raw[want_at : want_at + itemsize]
            if got != want:
                raise Mismatch(f"{where}: element {idx} is {got.hex()}, the value holds {want.hex()} at byte {want_at}")
    return total


def _check_accepted(metadata: dict, header: Any) -> None:
    """A decoded message is one wire format 2 lets a reader accept (its envelope: the oracle's
    own reading of docs/wire-format.md, not the codec's checks)."""
    if "tc.version" in metadata:
        raise Mismatch(f"decoded a message with version 1's tc.version key ({metadata['tc.version']!r:.80})")
    if type(header) is not dict:
        raise Mismatch(f"decoded a message whose header is a {type(header).__name__}")
    version, transport = header.get("version"), header.get("transport")
    if type(version) is not int or version != VERSION:
        raise Mismatch(f"decoded a message whose header's version is {version!r:.80}, not {VERSION}")
    if type(transport) is not str or transport not in TRANSPORTS:
        raise Mismatch(f"decoded a message whose header's transport is {transport!r:.80}")
    extra = header.keys() - top_keys(transport)
    if extra:
        raise Mismatch(f"decoded a {transport} message whose header has other keys: {sorted(extra)!r:.200}")


def _touch(obj: Any, metadata: dict, value: Any, rng: random.Random) -> int:
    header = json.loads(metadata["tc.header"])
    _check_accepted(metadata, header)
    leaves = header["leaves"]
    tensors = _tensors(obj, [])
    if len(tensors) != len(leaves):
        raise Mismatch(f"{len(tensors)} tensors decoded, header has {len(leaves)} leaves")
    tags = [node["t"] for node in tensor_nodes(header["tree"])]
    raw = _value_bytes(value) if header["transport"] == "host" else None
    checksum = 0
    for i, (t, leaf) in enumerate(zip(tensors, leaves)):
        checksum += _touch_one(i, t, leaf, tags[i] if len(tags) == len(leaves) else None, raw, rng)
    return checksum


def _logical_bytes(obj: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(obj, []))


def _keep(obj: Any) -> None:
    if _logical_bytes(obj) > KEEP_MAX_BYTES:
        return
    kept = tc.keep(obj)
    for t in _tensors(kept, []):
        plain = plain_of(t)
        if plain.numel():
            lo, hi = _span(plain)
            if hi > plain.untyped_storage().nbytes():
                raise ViewOutOfBounds(
                    f"tc.keep: a tensor addresses bytes [{lo}, {hi}) of a storage of {plain.untyped_storage().nbytes()}"
                )
            torch.empty(0, dtype=torch.uint8).set_(plain.untyped_storage())[lo:hi].sum(dtype=torch.int64)
    del kept


def run_case(case: dict, index: int = 0) -> Outcome:
    """Decode `case` (from tools/fuzz/mutators.make_case or a reproducer) and classify what happened."""
    stage = "build"
    try:
        value = values.build(case["value"])
        metadata = case["metadata"]
        call = case["call"]
        rng = random.Random(index)
        stage = "decode"
        # Released by the scope's end, or by tc.release: both are exercised.
        with tc.scope() if call["scope"] else contextlib.nullcontext():
            obj = _decode(call, value, metadata)
            stage = "touch"
            _touch(obj, metadata, value, rng)
            _check_strings(obj)
            if call["keep"]:
                stage = "keep"
                _keep(obj)
            stage = "release"
            if not call["scope"]:
                tc.release(obj)
        del obj
        return Outcome("ok")
    except tc.DecodeError as e:
        if stage == "decode":
            return Outcome("DecodeError", stage, str(e)[:500])
        return Outcome("other:DecodeError", stage, str(e)[:500], traceback.format_exc())
    except Exception as e:  # noqa: BLE001 - anything else is what the fuzzer looks for
        name = type(e).__name__
        if stage == "build":  # the fuzzer's own bug, not the decoder's
            name = "HarnessError"
        return Outcome(f"other:{name}", stage, f"{type(e).__name__}: {str(e)[:500]}", traceback.format_exc())
