"""How close a lossy copy of a frame is to its source: PSNR and mean absolute difference, the
bounds the JPEG nodes are held to (corrupt or stale output lands far outside them: noise from an
unfinished encode measures 10-20 dB, a valid quality-90 JPEG of the test pattern 36-62 dB)."""

from __future__ import annotations

import math

import torch

__all__ = ["psnr", "mean_abs_diff", "compare"]


def _diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape != b.shape:
        raise ValueError(f"shape: expected {tuple(b.shape)}, got {tuple(a.shape)}")
    return a.to(torch.float32) - b.to(device=a.device, dtype=torch.float32)


def psnr(a: torch.Tensor, b: torch.Tensor, peak: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB (inf for identical frames)."""
    mse = float(_diff(a, b).square().mean())
    return math.inf if mse == 0 else 10 * math.log10(peak * peak / mse)


def mean_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(_diff(a, b).abs().mean())


def compare(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """-> (psnr in dB, mean absolute difference), from one difference image."""
    d = _diff(a, b)
    mse = float(d.square().mean())
    return (math.inf if mse == 0 else 10 * math.log10(255.0 * 255.0 / mse)), float(d.abs().mean())
