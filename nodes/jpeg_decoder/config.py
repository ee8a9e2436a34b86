"""Settings of the JPEG decoder (the table is also its `dora-node.yml` env section)."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.delivery import DELIVERY_SETTINGS
from ..common.jpeg_engines import ENGINE_CHOICES
from ..common.settings import Setting, settings_dataclass

INPUT = "jpeg"
OUTPUT = "image"

# The header check's own bounds (../common/jpeg_header.py: MAX_SCANS, MAX_SEGMENTS, MAX_SCAN_PIXELS,
# why each is what it is), written out: --help reads this table without torch, which that module
# imports. A test checks they agree.
DEFAULT_MAX_SCANS, DEFAULT_MAX_SEGMENTS, DEFAULT_MAX_SCAN_PIXELS = 64, 512, 2**30

SETTINGS = (
    Setting(
        "MODE",
        "choice",
        "auto",
        "Channels of the decoded frame: `auto` (the source frame's `channels` when the message says, else 1 for a "
        "greyscale JPEG and 3 otherwise), `rgb` or `gray`.",
        ("auto", "rgb", "gray"),
    ),
    Setting(
        "BATCH",
        "int",
        "4",
        "Decode up to this many JPEGs that are already queued in one call (JPEGs never wait for a batch to fill).",
        minimum=1,
    ),
    Setting(
        "WORKERS",
        "int",
        "2",
        "Concurrent decoders: threads, each with its own CUDA stream on a GPU, so checking, decoding and sending "
        "overlap. Output order is input order.",
        minimum=1,
    ),
    Setting(
        "MAX_PIXELS",
        "int",
        "67108864",
        "Refuse a JPEG whose header declares more pixels than this (64 Mpx, more than 8K), before any memory is taken. "
        "A frame is also refused when its bytes (channels x height x width) are more than the `image` output can "
        "carry (dora's routes from this node: its shared_memory_pool_size); the smaller limit applies, and both are "
        "logged at start.",
        minimum=1,
    ),
    Setting(
        "MAX_SCANS",
        "int",
        str(DEFAULT_MAX_SCANS),
        "Refuse a JPEG with more scans than this, before decoding: each scan is another pass over the image, so a "
        "progressive JPEG with one scan repeated costs seconds for a few hundred kilobytes. libjpeg writes 10 scans "
        "for a colour progressive JPEG, 6 for a grey one, 1 for a baseline one.",
        minimum=1,
    ),
    Setting(
        "MAX_SCAN_PIXELS",
        "int",
        str(DEFAULT_MAX_SCAN_PIXELS),
        "Refuse a JPEG whose scans x pixels is more than this, before decoding: what decoding a progressive JPEG "
        "costs is about linear in it. The default (2^30) lets libjpeg's 10 scans over 8192x8192 through, and 64 "
        "scans up to 16 Mpx.",
        minimum=1,
    ),
    Setting(
        "MAX_SEGMENTS",
        "int",
        str(DEFAULT_MAX_SEGMENTS),
        "Refuse a JPEG with more marker segments (start to end of image) than this, before decoding; a sane one has "
        "a dozen, a progressive one about 30, EXIF and ICC profiles add a few.",
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
    *DELIVERY_SETTINGS,
)


@settings_dataclass(SETTINGS)
class DecoderConfig:
    """The parsed settings: a field per setting (MAX_PIXELS -> max_pixels)."""


def load_config(env: Mapping[str, str]) -> DecoderConfig:
    return DecoderConfig.from_env(env)
