"""The encoder node's engines (ENGINE=auto|torchcodec|torchvision|nvimgcodec; see
../../common/jpeg_engines.py for how `auto` chooses). Each library's module is imported only
when its engine is made: an engine that is not installed costs nothing."""

from __future__ import annotations

import torch

from ...common.jpeg_engines import EngineChoice, choose_encoder
from .base import Encoded, JpegEngine

__all__ = ["Encoded", "JpegEngine", "make_engine", "choose_encoder"]


def make_engine(choice: EngineChoice, device: torch.device, quality: int, workers: int) -> JpegEngine:
    """The engine `choice` names (from choose_encoder) on `device`."""
    device = torch.device(device)
    if choice.name == "torchcodec":
        from .torchcodec_engines import TorchCodecEngine

        return TorchCodecEngine(device, quality, workers)
    if choice.name == "torchvision":
        from .torchvision_engines import TorchvisionCpuEngine, TorchvisionCudaEngine

        return (
            TorchvisionCudaEngine(device, quality, workers)
            if device.type == "cuda"
            else TorchvisionCpuEngine(quality, workers)
        )
    if choice.name == "nvimgcodec":
        from .nvimgcodec_engine import NvImgCodecEngine

        return NvImgCodecEngine(device, quality, choice.subsampling or "420", workers)
    raise ValueError(f"engine: expected one of torchcodec, torchvision, nvimgcodec, got {choice.name!r}")
