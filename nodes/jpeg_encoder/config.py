"""Settings of the JPEG encoder (the table is also its `dora-node.yml` env section)."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.delivery import DELIVERY_SETTINGS
from ..common.jpeg_engines import ENGINE_CHOICES, SUBSAMPLING_CHOICES
from ..common.settings import Setting, settings_dataclass

INPUT = "frames"
OUTPUT = "jpeg"

SETTINGS = (
    Setting("QUALITY", "int", "90", "JPEG quality, 1 (smallest) to 100 (best).", minimum=1, maximum=100),
    Setting(
        "BATCH",
        "int",
        "4",
        "Encode up to this many frames that are already queued in one call (frames never wait for a batch to fill).",
        minimum=1,
    ),
    Setting(
        "WORKERS",
        "int",
        "2",
        "Concurrent encoders: threads, each with its own CUDA stream on a GPU. Output order is input order.",
        minimum=1,
    ),
    Setting(
        "DEVICE",
        "device",
        "auto",
        "Where frames are encoded: auto (CUDA when present, else the CPU), cpu, cuda or cuda:N.",
    ),
    Setting(
        "ENGINE",
        "choice",
        "auto",
        "The JPEG library: `auto` (on CUDA nvimgcodec, else torchcodec, else torchvision; on the CPU torchcodec, "
        "else torchvision, else nvimgcodec; logged once at start as engine=<name>, with why when it fell back), "
        "`torchcodec` (TorchCodec), `torchvision` (torchvision.io, deprecated since 0.29) or `nvimgcodec` (NVIDIA "
        "nvImageCodec, batched; the optional extra `nvimgcodec`).",
        ENGINE_CHOICES,
    ),
    Setting(
        "SUBSAMPLING",
        "choice",
        "auto",
        "Chroma subsampling of colour JPEGs: `auto` (the engine's own, 4:2:0 where it can choose: what cameras and "
        "libjpeg write, a third smaller than 4:4:4), `420` or `444`. TorchCodec and torchvision write 4:2:0 on the "
        "CPU and 4:4:4 on CUDA only, nvimgcodec either; a setting the engine cannot meet stops the node at start "
        "(with ENGINE=auto, an engine that can is chosen).",
        SUBSAMPLING_CHOICES,
    ),
    *DELIVERY_SETTINGS,
)


@settings_dataclass(SETTINGS)
class EncoderConfig:
    """The parsed settings: a field per setting (QUALITY -> quality)."""


def load_config(env: Mapping[str, str]) -> EncoderConfig:
    return EncoderConfig.from_env(env)
