"""How close a lossy copy of a frame is to its source: PSNR and mean absolute difference, the
bounds the JPEG nodes are held to (corrupt or stale output lands far outside them: noise from an
unfinished encode measures 10-20 dB, a valid quality-90 JPEG of the test pattern 36-62 dB)."""

from __future__ import annotations

import math

import torch

__all__ = ["psnr", "mean_abs_diff", "compare"]

_LEVELS = torch.arange(256, dtype=torch.float64)


def _histogram(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many samples differ by 0, 1, ... 255 (float64, on the CPU). For uint8 frames the
    absolute difference is max - min, in uint8, and one bincount gives both measures exactly:
    5 times faster on a 4K frame than float arithmetic over the whole frame."""
    if a.shape != b.shape:
        raise ValueError(f"shape: expected {tuple(b.shape)}, got {tuple(a.shape)}")
    b = b.to(a.device)
    if a.dtype == b.dtype == torch.uint8:
        diff = torch.maximum(a, b).sub_(torch.minimum(a, b)).reshape(-1)
        return torch.bincount(diff, minlength=256).to("cpu", torch.float64)
    diff = (a.to(torch.float64) - b.to(torch.float64)).abs().reshape(-1)
    return torch.stack(
        [diff.numel() * torch.ones((), dtype=torch.float64), diff.sum().cpu(), diff.square().sum().cpu()]
    )


def _moments(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, int]:
    """-> (sum of |d|, sum of d^2, count)."""
    h = _histogram(a, b)
    if h.numel() == 3:  # not uint8: (count, sum |d|, sum d^2)
        return float(h[1]), float(h[2]), int(h[0])
    return float((h * _LEVELS).sum()), float((h * _LEVELS * _LEVELS).sum()), int(h.sum())


def _psnr(square_sum: float, count: int, peak: float = 255.0) -> float:
    return math.inf if square_sum == 0 or count == 0 else 10 * math.log10(peak * peak / (square_sum / count))


def psnr(a: torch.Tensor, b: torch.Tensor, peak: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB (inf for identical frames)."""
    _, square_sum, count = _moments(a, b)
    return _psnr(square_sum, count, peak)


def mean_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    absolute_sum, _, count = _moments(a, b)
    return absolute_sum / count if count else 0.0


def compare(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """-> (psnr in dB, mean absolute difference), from one pass over the frames."""
    absolute_sum, square_sum, count = _moments(a, b)
    return _psnr(square_sum, count), (absolute_sum / count if count else 0.0)
