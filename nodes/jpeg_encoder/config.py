"""The JPEG encoder's settings table (its config class) and interface (SPEC): what its `dora-node.yml`
and `--help` are written from; no torch or dora here, so main.py answers `--help` at once."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.delivery import DELIVERY_SETTINGS, ack_inputs_port, ack_output_port
from ..common.jpeg_engines import ENGINE_CHOICES, SUBSAMPLING_CHOICES
from ..common.manifest import NodeSpec, Port
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


# The node's interface, as its manifest (dora-node.yml) and --help show it.
SPEC = NodeSpec(
    name="tc-jpeg-encoder",
    description=(
        "Encodes frames to JPEG with TorchCodec (CPU or CUDA), NVIDIA nvImageCodec (batched, CUDA) or torchvision "
        "(ENGINE), ordered by construction on CUDA: each worker's own stream waits on the frame's event (the node's "
        "main thread never waits on the host for the producer) and bytes are read only after the encode is known to "
        "be done. Output order is input order."
    ),
    inputs=(
        Port(
            INPUT,
            "Frames: a tv_tensors.Image (uint8, (C, H, W), 1 or 3 channels, CPU or CUDA) through tensor_codec, or a "
            "plain dora image message (rgb8, bgr8, mono8). Anything else is logged, counted and skipped.",
        ),
        ack_inputs_port(
            OUTPUT,
            "Frames being encoded come on top of WINDOW; frames wait, unacknowledged, until there is room, so a "
            "slow consumer slows the frames' sender down. The node ends when `frames` closed and every JPEG was "
            "acknowledged.",
        ),
    ),
    outputs=(
        Port(
            OUTPUT,
            "One JPEG per frame as a flat UInt8 array, the form dora's image nodes (plot, record) read.",
            {
                "encoding": "jpeg",
                "width": "frame width in px",
                "height": "frame height in px",
                "channels": (
                    "channels of the source frame (1 or 3); on a GPU greyscale is encoded as equal RGB, a decoder "
                    "restores 1 channel"
                ),
                "quality": "QUALITY",
                "subsampling": "the JPEG's chroma subsampling as its header says: 420, 444 or gray",
                "jpeg_crc32": "zlib.crc32 of the JPEG bytes; tc-jpeg-decoder refuses a JPEG that no longer matches it",
                "sent_ns": "wall clock (ns) just before sending",
                "(carried)": (
                    "every other key of the frame's metadata (frame, capture_ns, seq, count, stream, pattern, ...), "
                    "except tensor_codec's tc.* keys, checksum, wants_ack and expect"
                ),
                "stream, wants_ack": (
                    "with `ack*` inputs: a stream id of this node's own (seq and count stay the frame's) and "
                    "wants_ack true"
                ),
            },
        ),
        ack_output_port("frame", " when the encoder takes it (empty value)", "the frames' sender's `ack*` input"),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: camera
    path: tc-camera-source
    outputs: [image]
  - id: jpeg-encoder
    path: tc-jpeg-encoder
    inputs:
      frames: {source: camera/image, queue_size: 16}
    outputs: [jpeg]
    env:
      QUALITY: "90"
""",
)
