"""Settings of the camera source (the table is also its `dora-node.yml` env section)."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.delivery import DELIVERY_SETTINGS
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
        "FRAMES", "int", "0", "Stop after this many frames; 0 = endless (or until a video or folder ends).", minimum=0
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
