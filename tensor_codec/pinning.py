"""pin_memory for whole structures, keeping every TVTensor class and attribute (failure mode 3)."""

from __future__ import annotations

from typing import Any

import torch

from .errors import UsageError
from .tree import map_tensors

__all__ = ["pin_memory"]


def _pin(plain: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
    if plain.device.type != "cpu" or plain.is_pinned():
        return plain
    return plain.pin_memory()


def pin_memory(obj: Any) -> Any:
    """Pin every CPU tensor of `obj` (page-locked memory for fast, async host-to-GPU copies). The
    structure, every TVTensor class and attribute, and PackedSequences come back intact; tensors
    already pinned or not on the CPU are left as they are. Without a usable CUDA device, whose
    driver page-locked memory belongs to, `UsageError` says so (not torch's "Found no NVIDIA
    driver" from deep inside)."""
    if not torch.cuda.is_available():
        raise UsageError(
            "tc.pin_memory: expected a usable CUDA device (page-locked memory is the CUDA driver's), got none: "
            f"torch {torch.__version__} reports torch.cuda.is_available() False (a CPU-only build or no NVIDIA "
            "driver). "
            "Pinning only speeds up copies to a GPU: call it only when torch.cuda.is_available()"
        )
    return map_tensors(_pin, obj)
