"""The JPEG decoder's settings table (its config class) and interface (SPEC): what its `dora-node.yml`
and `--help` are written from; no torch or dora here, so main.py answers `--help` at once."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.delivery import DELIVERY_SETTINGS, ack_inputs_port, ack_output_port
from ..common.jpeg_engines import ENGINE_CHOICES
from ..common.manifest import NodeSpec, Port
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


# The node's interface, as its manifest (dora-node.yml) and --help show it.
SPEC = NodeSpec(
    name="tc-jpeg-decoder",
    description=(
        "Decodes JPEG messages to tv_tensors.Image frames sent through tensor_codec, with TorchCodec, nvImageCodec or "
        "torchvision (ENGINE) on CUDA (the node's stream is drained before each decode, so no block still in use is "
        "written) or the CPU; EXIF orientation is applied by every engine. Every JPEG is "
        "checked before any engine sees it: markers, its pixels (MAX_PIXELS), scans (MAX_SCANS), scans x pixels "
        "(MAX_SCAN_PIXELS), marker segments (MAX_SEGMENTS), the decoded frame's bytes against what `image` can "
        "carry, metadata width/height and jpeg_crc32; a bad, corrupt or too costly one is logged with the bound that "
        "refused it, counted and skipped."
    ),
    inputs=(
        Port(
            INPUT,
            "JPEG bytes as a flat UInt8 array (encoding: jpeg), e.g. from tc-jpeg-encoder or any dora camera node "
            "that sends JPEG.",
        ),
        ack_inputs_port(
            OUTPUT,
            "JPEGs wait, unacknowledged, until there is room in the window, so a slow consumer slows the JPEGs' "
            "sender down. The node ends when `jpeg` closed and every frame was acknowledged.",
        ),
    ),
    outputs=(
        Port(
            OUTPUT,
            "One tv_tensors.Image (uint8, (C, H, W)) per JPEG, through tensor_codec, on DEVICE.",
            {
                "pixel_format": (
                    "rgb8 or mono8. Never dora's encoding/width/height: the value is a tensor_codec message, not "
                    "flat pixels (the frame's size is the tensor's shape)"
                ),
                "lossy": (
                    "jpeg: the frame went through JPEG (its content matches the source within bounds, not exactly)"
                ),
                "sent_ns": "wall clock (ns) just before sending",
                "(carried)": (
                    "every other key of the JPEG message (quality, subsampling, frame, capture_ns, seq, count, "
                    "stream, pattern, ...), except encoding, width, height, channels and jpeg_crc32"
                ),
                "stream, wants_ack": (
                    "with `ack*` inputs: a stream id of this node's own (seq and count stay the JPEG's) and "
                    "wants_ack true"
                ),
            },
        ),
        ack_output_port("JPEG", " when the decoder takes it (empty value)", "the JPEGs' sender's `ack*` input"),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: jpeg-decoder
    path: tc-jpeg-decoder
    inputs:
      jpeg: {source: jpeg-encoder/jpeg, queue_size: 16}
    outputs: [image]
  - id: receiver
    path: tc-tensor-receiver
    inputs:
      decoded: jpeg-decoder/image
""",
)
