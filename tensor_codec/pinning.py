"""pin_memory for whole structures, keeping every TVTensor class and attribute (failure mode 3)."""

from __future__ import annotations

from typing import Any

import torch

from .tree import map_tensors

__all__ = ["pin_memory"]


def _pin(plain: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
    if plain.device.type != "cpu" or plain.is_pinned():
        return plain
    return plain.pin_memory()


def pin_memory(obj: Any) -> Any:
    """Pin every CPU tensor of `obj` (page-locked memory for fast, async host-to-GPU copies).

    The structure, every TVTensor class and attribute, and PackedSequences come back intact;
    tensors already pinned or not on the CPU are left as they are. Needs a CUDA-capable torch
    with a GPU present (torch raises otherwise).
    """
    return map_tensors(_pin, obj)
