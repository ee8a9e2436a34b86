"""Settings of the JPEG encoder (the table is also its `dora-node.yml` env section)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..common.delivery import ack_settings
from ..common.settings import Setting, as_fields, load_settings

INPUT = "frames"
OUTPUT = "jpeg"
ACK_OUTPUT = "ack"  # acknowledges each frame taken to its sender (when declared)

SETTINGS = (
    Setting("QUALITY", "int", "90", "JPEG quality, 1 (smallest) to 100 (best).", minimum=1, maximum=100),
    Setting("BATCH", "int", "4", "Encode up to this many frames that are already queued in one call (frames never wait for a batch to fill).", minimum=1),
    Setting("WORKERS", "int", "2", "Concurrent encoders: threads, each with its own CUDA stream on a GPU. Output order is input order.", minimum=1),
    Setting("DEVICE", "device", "auto", "Where frames are encoded: auto (nvJPEG on CUDA when present, else the CPU), cpu, cuda or cuda:N."),
    *ack_settings("JPEG"),
)


@dataclass(frozen=True)
class EncoderConfig:
    """The parsed settings (defaults live in SETTINGS)."""

    quality: int
    batch: int
    workers: int
    device: str
    window: int
    retry_s: float
    ack_timeout_s: float


def load_config(env: Mapping[str, str]) -> EncoderConfig:
    return EncoderConfig(**as_fields(load_settings(env, SETTINGS)))
