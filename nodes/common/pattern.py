"""The synthetic camera's test pattern: deterministic frames that carry their own index.

A frame is a fixed colour gradient with two bars whose positions move with the frame index (a
white one sweeping right, a black one sweeping down), and a strip of black/white cells along the
top edge that encodes the index (32 bits, least significant first) and an 8-bit check (the low
byte of the index's CRC-32). Cells are at least 8 px and aligned to JPEG's 8/16-px blocks; a
reader averages the centre of each cell and thresholds at mid-grey, so the index survives JPEG at
quality 75 and mild scaling of values.
The bars are neutral (no chroma) on purpose: saturated colour edges at arbitrary positions are
where JPEG's default 4:2:0 chroma subsampling loses most (30-36 dB at quality 90 with the
magenta/cyan bars of v1); with neutral bars every size from 240p to 4K stays above 36 dB at
quality 90, so a JPEG round trip can be held to a tight bound that corruption cannot meet.
Everything is integer arithmetic, so the CPU and CUDA render the same bytes: a receiver can
rebuild the exact frame from its index and compare.
"""

from __future__ import annotations

import zlib
from functools import lru_cache

import torch

__all__ = ["PATTERN_NAME", "render", "read_index", "same_pixels", "code_geometry", "check_size"]

PATTERN_NAME = "tc-synthetic-v2"  # v2: neutral bars (v1 had magenta/cyan ones)
INDEX_BITS = 32
CHECK_BITS = 8
CODE_BITS = INDEX_BITS + CHECK_BITS


def code_geometry(height: int, width: int) -> tuple[int, int, int]:
    """-> (cell size in px, cells per row, rows of cells) for a frame size."""
    short = min(height, width)
    cell = 16 * (short // 240) if short >= 240 else 8
    per_row = max(1, width // cell)
    rows = -(-CODE_BITS // per_row)
    return cell, per_row, rows


def check_size(height: int, width: int) -> None:
    """Raise ValueError if a frame is too small to carry the index strip and the moving bars."""
    cell, per_row, rows = code_geometry(height, width)
    if width < 64 or height < rows * cell + 16:
        raise ValueError(
            f"frame size: expected at least 64 px wide and {rows * cell + 16} px high for the index strip, "
            f"got {width}x{height}"
        )


def _check_byte(index: int) -> int:
    return zlib.crc32(index.to_bytes(4, "little")) & 0xFF


def _bits(index: int) -> list[int]:
    value = index | (_check_byte(index) << INDEX_BITS)
    return [(value >> i) & 1 for i in range(CODE_BITS)]


@lru_cache(maxsize=8)
def _background(height: int, width: int, channels: int, device: torch.device, hwc: bool) -> torch.Tensor:
    x = torch.arange(width, dtype=torch.int64, device=device)
    y = torch.arange(height, dtype=torch.int64, device=device)
    red = (x * 255 // max(width - 1, 1)).expand(height, width)
    green = (y * 255 // max(height - 1, 1))[:, None].expand(height, width)
    blue = (x[None, :] + y[:, None]) * 255 // max(width + height - 2, 1)
    if channels == 1:
        planes = [(red + green + blue) // 3]
    else:
        planes = [red, green, blue]
    frame = torch.stack(planes).to(torch.uint8)
    # hwc: the same (C, H, W) values, stored pixel by pixel as dora's rgb8 messages are
    return frame.permute(1, 2, 0).contiguous().permute(2, 0, 1) if hwc else frame


def render(
    index: int, height: int, width: int, *, channels: int = 3, device: torch.device | str = "cpu", hwc: bool = False
) -> torch.Tensor:
    """The frame for `index` as a (channels, height, width) uint8 tensor on `device`; with `hwc`
    its memory is interleaved (``frame.permute(1, 2, 0)`` is contiguous), ready for rgb8 bytes."""
    if not 0 <= index < 2**INDEX_BITS:
        raise ValueError(f"index: expected 0 <= index < 2**32, got {index}")
    if channels not in (1, 3):
        raise ValueError(f"channels: expected 1 or 3, got {channels}")
    check_size(height, width)
    device = torch.device(device)
    frame = _background(height, width, channels, device, hwc).clone()  # clone keeps the layout
    cell, per_row, rows = code_geometry(height, width)
    strip = rows * cell
    # Moving bars below the strip: a white vertical one sweeping right, a black horizontal one
    # sweeping down (neutral, see the module docstring).
    bar = max(4, cell // 2)
    x0 = (index * 7) % (width - bar)
    y0 = strip + (index * 5) % (height - strip - bar)
    frame[:, strip:, x0 : x0 + bar] = 255
    frame[:, y0 : y0 + bar, :] = 0
    # The index strip: one value per cell, expanded to cell x cell blocks in one assignment.
    cells = torch.zeros(rows * per_row, dtype=torch.uint8)
    cells[:CODE_BITS] = torch.tensor(_bits(index), dtype=torch.uint8) * 255
    block = cells.reshape(rows, 1, per_row, 1).expand(rows, cell, per_row, cell).reshape(strip, per_row * cell)
    frame[:, :strip, : per_row * cell] = block.to(device)
    frame[:, :strip, per_row * cell :] = 0
    return frame


def read_index(frame: torch.Tensor) -> int | None:
    """The index a frame carries, or None if its strip does not decode (wrong check byte)."""
    if frame.dim() != 3 or frame.shape[0] not in (1, 3):
        return None
    _, height, width = frame.shape
    try:
        check_size(height, width)
    except ValueError:
        return None
    cell, per_row, rows = code_geometry(height, width)
    strip = frame[:, : rows * cell, : per_row * cell].float()
    grid = strip.reshape(frame.shape[0], rows, cell, per_row, cell)
    lo, hi = cell // 4, cell - cell // 4
    means = grid[:, :, lo:hi, :, lo:hi].mean(dim=(0, 2, 4)).reshape(-1)[:CODE_BITS]
    bits = (means > 127.5).tolist()
    value = sum(1 << i for i, bit in enumerate(bits) if bit)
    index, check = value & (2**INDEX_BITS - 1), value >> INDEX_BITS
    return index if check == _check_byte(index) else None


def same_pixels(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal for two integer frames, 8 bytes at a time when both store their pixels in the
    same dense order at 8-byte aligned offsets (about 7x faster than comparing bytes on a CPU).
    Integer dtypes only: for floats, bytes and values compare differently (NaN, -0.0)."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    integer = not (a.dtype.is_floating_point or a.dtype.is_complex)
    aligned = (a.storage_offset() * a.element_size()) % 8 == 0 and (b.storage_offset() * b.element_size()) % 8 == 0
    if integer and aligned and a.stride() == b.stride():
        order = sorted(range(a.dim()), key=lambda d: a.stride(d), reverse=True)
        flat_a, flat_b = a.permute(order), b.permute(order)
        if flat_a.is_contiguous() and flat_b.is_contiguous() and a.numel() * a.element_size() % 8 == 0:
            return torch.equal(flat_a.reshape(-1).view(torch.int64), flat_b.reshape(-1).view(torch.int64))
    return torch.equal(a, b)
