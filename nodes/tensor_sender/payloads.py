"""What the tensor sender sends: payloads by mode, and deliberately corrupted messages."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
from torch.nn.utils.rnn import PackedSequence

import tensor_codec as tc
from tensor_codec.digest import content_digest
from tensor_codec.testing import make_suite

from ..common.settings import SettingError
from .config import SenderConfig


@dataclass
class Payload:
    """One object to send. A `stamped` payload gets each message's seq written into its first
    four bytes, so consecutive messages differ (random load); its checksum is computed per
    message. Other payloads never change, so their checksum is computed once."""

    case: str
    obj: Any
    stamped: bool = False
    _checksum: str | None = field(default=None, repr=False)

    def build(self, seq: int) -> tuple[Any, str]:
        if self.stamped:
            self.obj.view(torch.int32)[0] = seq % 2**31
            return self.obj, content_digest(self.obj)
        if self._checksum is None:
            self._checksum = content_digest(self.obj)
        return self.obj, self._checksum


def to_device(obj: Any, device: torch.device) -> Any:
    """Move every tensor of a structure with its exact layout (see `move_keeping_layout`), keeping
    TVTensor classes and attributes; a PackedSequence moves the torch way (batch_sizes stay on
    the CPU)."""
    if device.type == "cpu":
        return obj
    if isinstance(obj, PackedSequence):
        return obj.to(device)
    if isinstance(obj, torch.Tensor):
        return tc.map_tensors(lambda plain, original: move_keeping_layout(plain, device), obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):
        return type(obj)(*(to_device(v, device) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def move_keeping_layout(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` on `device` as the same view of a copy of its whole storage: strides, storage offset,
    stride-0 dims, overlaps and the conj / neg bits survive, so the failure-mode layouts are
    still those layouts on a GPU (`t.to(device)` would hand over compact copies)."""
    storage = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
    moved_storage = storage.to(device, copy=True).untyped_storage()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex32 is "experimental"
        moved = torch.empty(0, dtype=t.dtype, device=device)
    moved.set_(moved_storage, t.storage_offset(), t.shape, t.stride())
    if t.is_conj():
        moved = moved.conj()
    if t.is_neg():
        moved = torch._neg_view(moved)  # the only way to rebuild a lazy negation
    if t.requires_grad:
        moved.requires_grad_(True)
    return moved


def suite_payloads(seed: int, device: torch.device) -> list[Payload]:
    return [Payload(f"suite/{name}", to_device(obj, device)) for name, obj in make_suite(seed).items()]


def random_payloads(sizes: tuple[int, ...], seed: int, device: torch.device) -> list[Payload]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for size in sizes:
        raw = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=g)
        out.append(Payload(f"random/{_label(size)}", raw.view(torch.float32).to(device), stamped=True))
    return out


def safetensors_payloads(path: str, device: torch.device) -> list[Payload]:
    """Each tensor of the file, in name order. safetensors is a plain header plus raw bytes:
    nothing in the file is executed."""
    if not Path(path).is_file():
        raise SettingError(f"FILE: expected a .safetensors file, got {path!r} (not found)")
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise SettingError(
            "MODE: safetensors needs the safetensors package, which is not installed "
            "(pip install safetensors, or the checkout's extra: pip install '<checkout>[safetensors]')"
        ) from None

    try:
        tensors = load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise SettingError(f"FILE: expected a valid .safetensors file, got {path!r} ({e})") from None
    if not tensors:
        raise SettingError(f"FILE: expected at least one tensor in {path!r}, found none")
    return [Payload(f"file/{name}", tensors[name].to(device)) for name in sorted(tensors)]


def make_payloads(config: SenderConfig, device: torch.device) -> list[Payload]:
    if config.mode == "suite":
        return suite_payloads(config.seed, device)
    if config.mode == "random":
        return random_payloads(config.sizes, config.seed, device)
    return safetensors_payloads(config.file, device)


def _label(size: int) -> str:
    for unit, factor in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


def corrupted_messages(seed: int) -> list[tuple[str, pa.Array, dict]]:
    """(case, value, codec metadata) of messages a receiver must refuse with a clear error."""
    value, metadata = tc.encode(make_suite(seed)["layout/stacked"])
    header = metadata["tc.header"]
    flags, flag_metadata = tc.encode(torch.tensor([True, False]))
    raw = bytearray(flags.buffers()[1].to_pybytes()[: len(flags)])
    raw[0] = 7  # the bytes of a bool tensor must be 0 or 1
    return [
        ("corrupt/truncated_buffer", value.slice(0, len(value) - 1), metadata),
        ("corrupt/unknown_dtype", value, {**metadata, "tc.header": header.replace('"float32"', '"float128"')}),
        ("corrupt/broken_header_json", value, {**metadata, "tc.header": header[:-3]}),
        ("corrupt/missing_codec_keys", pa.array([1, 2, 3], type=pa.uint8()), {}),
        ("corrupt/bool_byte", pa.array(list(raw), type=pa.uint8()), flag_metadata),
    ]
