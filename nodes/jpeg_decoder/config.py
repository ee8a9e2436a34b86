"""Settings of the JPEG decoder (the table is also its `dora-node.yml` env section)."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.delivery import ack_settings
from ..common.jpeg_engines import ENGINE_CHOICES
from ..common.settings import Setting, settings_dataclass

INPUT = "jpeg"
OUTPUT = "image"

SETTINGS = (
    Setting(
        "MODE",
        "choice",
        "auto",
        "Channels of the decoded frame: `auto` (the source frame's `channels` when the message says, else 1 for a "
        "greyscale JPEG and 3 otherwise), `rgb` or `gray`.",
        ("auto", "rgb", "gray"),
    ),
    Setting("BATCH", "int", "4", "Decode up to this many JPEGs that are already queued in one call.", minimum=1),
    Setting(
        "MAX_PIXELS",
        "int",
        "67108864",
        "Refuse a JPEG whose header declares more pixels than this (64 Mpx, more than 8K), before any memory is taken.",
        minimum=1,
    ),
    Setting(
        "DEVICE",
        "device",
        "auto",
        "Where frames are decoded and sent from: auto (CUDA when present, else the CPU), cpu, cuda or cuda:N.",
    ),
    Setting(
        "ENGINE",
        "choice",
        "auto",
        "The JPEG library: `auto` (on CUDA nvimgcodec, else torchcodec, else torchvision; on the CPU torchcodec, "
        "else torchvision, else nvimgcodec; logged once at start as engine=<name>, with why when it fell back), "
        "`torchcodec`, `torchvision` (deprecated since 0.29) or `nvimgcodec` (the optional extra `nvimgcodec`).",
        ENGINE_CHOICES,
    ),
    *ack_settings("frame"),
)


@settings_dataclass(SETTINGS)
class DecoderConfig:
    """The parsed settings: a field per setting (MAX_PIXELS -> max_pixels)."""


def load_config(env: Mapping[str, str]) -> DecoderConfig:
    return DecoderConfig.from_env(env)
