"""Decoding JPEGs on the CPU or with nvJPEG, ordered on the caller's stream.

torchvision's CUDA decoder (read in 0.19-0.29) allocates its outputs on the caller's current
stream but writes them from a private stream that does not wait on the caller's. A block the
caching allocator hands out may still be read by work queued earlier on the caller's stream
(reported on H100: decoded frames overwrote memory still in use), so the caller's stream is
drained first: a host wait on that one stream, not the device. The decoder then makes the
caller's stream wait on its own before returning, so results are ordered there.
"""

from __future__ import annotations

import torch
from torchvision.io import ImageReadMode, decode_jpeg

__all__ = ["decode_batch", "MODES"]

MODES = {1: ImageReadMode.GRAY, 3: ImageReadMode.RGB}


def decode_batch(jpegs: list[torch.Tensor], channels: list[int], device: torch.device) -> list[torch.Tensor | Exception]:
    """Decode each JPEG (a flat uint8 CPU tensor) to a (channels, H, W) uint8 tensor on
    `device`; a JPEG that fails yields its exception in its place, the others still decode."""
    if not jpegs:
        return []
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()  # the fence described above
    out: list[torch.Tensor | Exception] = [None] * len(jpegs)  # type: ignore[list-item]
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(channels):
        groups.setdefault(c, []).append(i)
    for c, indices in groups.items():
        batch = [jpegs[i] for i in indices]
        try:
            images = _decode(batch, MODES[c], device)
        except Exception:
            images = [_decode_one(j, MODES[c], device) for j in batch]  # find the bad one(s)
        for i, image in zip(indices, images):
            out[i] = image
    return out


def _decode(jpegs: list[torch.Tensor], mode: ImageReadMode, device: torch.device) -> list[torch.Tensor]:
    if device.type == "cuda":
        return list(decode_jpeg(jpegs, mode=mode, device=device))
    return [decode_jpeg(j, mode=mode) for j in jpegs]  # the CPU call loops anyway


def _decode_one(jpeg: torch.Tensor, mode: ImageReadMode, device: torch.device) -> torch.Tensor | Exception:
    try:
        return _decode([jpeg], mode, device)[0]
    except Exception as e:
        return e
