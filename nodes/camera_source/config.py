"""The camera source's settings table (its config class) and interface (SPEC): what its `dora-node.yml`
and `--help` are written from; no torch or dora here, so main.py answers `--help` at once."""

from __future__ import annotations

from collections.abc import Mapping

from ..common import protocol as P
from ..common.delivery import DELIVERY_SETTINGS, ack_inputs_port
from ..common.manifest import NodeSpec, Port
from ..common.settings import Setting, SettingError, settings_dataclass

OUTPUT = "image"
TICK_INPUT = "tick"

SETTINGS = (
    Setting(
        "SOURCE",
        "choice",
        "synthetic",
        "Where frames come from: `synthetic` (a moving test pattern that carries its frame index, no hardware), "
        "`camera` (V4L2/USB through OpenCV: `pip install opencv-python-headless`), `video` (a file, through OpenCV) "
        "or `images` (a folder of JPEG/PNG files).",
        ("synthetic", "camera", "video", "images"),
    ),
    Setting(
        "SOURCE_PATH",
        "path",
        "",
        "camera: a device index (`0`) or path (`/dev/video0`); video: the file; images: the folder. Unused for "
        "synthetic.",
        required_when="SOURCE is camera, video or images",
    ),
    Setting(
        "WIDTH",
        "int",
        "640",
        "Frame width in px. Real sources are resized to WIDTH x HEIGHT; 0 keeps their native size (the synthetic "
        "camera needs a size).",
        minimum=0,
    ),
    Setting("HEIGHT", "int", "480", "Frame height in px (see WIDTH).", minimum=0),
    Setting("CHANNELS", "choice", "3", "Synthetic camera only: 3 (rgb8) or 1 (mono8).", ("3", "1"), convert=int),
    Setting(
        "FPS",
        "float",
        "30",
        "Frames per second, paced by the node itself; 0 = as fast as possible. Ignored when a `tick` input is wired "
        "(one frame per tick).",
        minimum=0,
    ),
    Setting(
        "FRAMES",
        "int",
        "0",
        "Stop after this many frames; 0 = endless (or until a video or folder ends).",
        minimum=0,
        maximum=P.MAX_COUNT,
    ),
    Setting("LOOP", "bool", "0", "video / images: start again at the end instead of stopping."),
    Setting(
        "FORMAT",
        "choice",
        "codec",
        "`codec`: a tv_tensors.Image through tensor_codec. `raw`: flat HWC rgb8/mono8 bytes, the form dora's own "
        "image nodes (plot, record) read.",
        ("codec", "raw"),
    ),
    Setting(
        "LAYOUT",
        "choice",
        "planar",
        "Synthetic camera, FORMAT=codec: memory order of the (C, H, W) frames. `planar` (contiguous CHW) or "
        "`interleaved` (pixel by pixel, as real cameras deliver; the tensor_codec message keeps the strides). A CPU "
        "JPEG encoder is about 2x faster on interleaved frames: planar ones need a reordering pass first.",
        ("planar", "interleaved"),
    ),
    Setting("DEVICE", "device", "auto", "Where frames are made: auto (CUDA when present), cpu, cuda or cuda:N."),
    *DELIVERY_SETTINGS,
)


@settings_dataclass(SETTINGS)
class CameraConfig:
    """The parsed settings: a field per setting (SOURCE -> source)."""


def load_config(env: Mapping[str, str]) -> CameraConfig:
    config = CameraConfig.from_env(env)
    if config.source == "synthetic":
        if not config.width or not config.height:
            raise SettingError(
                f"WIDTH/HEIGHT: expected a frame size for the synthetic camera, got {config.width}x{config.height}"
            )
        from ..common.pattern import check_size

        try:
            check_size(config.height, config.width)
        except ValueError as e:
            raise SettingError(f"WIDTH/HEIGHT: {e}") from None
    elif not config.source_path:
        raise SettingError(
            f"SOURCE_PATH: expected a {'device index or path' if config.source == 'camera' else 'path'} for "
            f"SOURCE={config.source}, got nothing"
        )
    if (config.width == 0) != (config.height == 0):
        raise SettingError(
            f"WIDTH/HEIGHT: expected both set or both 0 (native size), got {config.width}x{config.height}"
        )
    return config


# The node's interface, as its manifest (dora-node.yml) and --help show it.
SPEC = NodeSpec(
    name="tc-camera-source",
    description=(
        "Frames as torchvision tv_tensors.Image (uint8, CHW) through tensor_codec, on CPU or CUDA: a synthetic "
        "test pattern that carries its own frame index (default, no hardware), a V4L2/USB camera, a video file "
        "or a folder of images. FORMAT=raw sends flat rgb8 for dora-hub image nodes instead."
    ),
    inputs=(
        Port(
            TICK_INPUT,
            "Optional. When wired (e.g. dora/timer/millis/33), one frame per tick instead of pacing at FPS.",
            optional=True,
        ),
        ack_inputs_port(OUTPUT),
    ),
    outputs=(
        Port(
            OUTPUT,
            "One frame per message: a tensor_codec message (FORMAT=codec) or flat HWC bytes (FORMAT=raw).",
            {
                "encoding": (
                    "FORMAT=raw only: rgb8 (3 channels) or mono8 (1 channel), dora's image convention: the value is "
                    "exactly height x width x channels interleaved bytes, what dora-hub image nodes read"
                ),
                "width": "FORMAT=raw only: frame width in px",
                "height": "FORMAT=raw only: frame height in px",
                "pixel_format": (
                    "FORMAT=codec only: rgb8 or mono8. A tensor_codec message never carries encoding/width/height: "
                    "hub image nodes would read its planar bytes as interleaved pixels (the frame's size is the "
                    "tensor's shape)"
                ),
                "frame": "frame index, 0, 1, 2, ...",
                "capture_ns": "wall clock (ns since the epoch) when the frame was captured or rendered",
                "sent_ns": "wall clock (ns) just before sending",
                "seq": "same as frame: per-stream sequence number",
                "count": "FRAMES (0 = open-ended)",
                "stream": "id of this run of the node",
                "wants_ack": (
                    "true when `ack*` inputs are wired: the consumer acknowledges seq and stream on its `ack` output"
                ),
                "pattern": "tc-synthetic-v2 on synthetic frames: the pixels carry `frame` and can be rebuilt exactly",
                "pattern_size": (
                    "WIDTHxHEIGHT the pattern was rendered at (a receiver tells a frame cropped upstream by it)"
                ),
                "tc.*": "tensor_codec's own keys (FORMAT=codec only)",
            },
        ),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: camera
    path: tc-camera-source
    shared_memory_pool_size: 64MB  # room for a few frames in flight
    outputs: [image]
    env:
      WIDTH: "1280"
      HEIGHT: "720"
      FPS: "30"
  - id: receiver
    path: tc-tensor-receiver
    inputs:
      frames: {source: camera/image, queue_size: 64}
""",
)
