"""Where frames come from. Each source returns (C, H, W) uint8 tensors on the node's device, or
None when it has no more frames."""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch

from ..common.pattern import render
from .config import CameraConfig

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")

log = logging.getLogger("camera-source")


class SourceError(RuntimeError):
    """A source that cannot be opened or read: names the setting and what went wrong."""


class FrameSource(Protocol):
    pattern: bool  # frames carry the synthetic index pattern (a receiver can verify content)

    def read(self, index: int) -> torch.Tensor | None: ...

    def describe(self) -> str:
        """What the source is and what it will give, as the start line says it ("video clip.mp4,
        640x480, 30 frames"): its own size and length where the settings leave them open."""
        ...

    def close(self) -> None: ...


class SyntheticSource:
    pattern = True

    def __init__(self, width: int, height: int, channels: int, device: torch.device, hwc: bool = False):
        self.size = (height, width)
        self.channels = channels
        self.device = device
        self.hwc = hwc  # interleaved memory: FORMAT=raw (rgb8 bytes) or LAYOUT=interleaved, no reordering pass

    def read(self, index: int) -> torch.Tensor:
        return render(index % 2**32, *self.size, channels=self.channels, device=self.device, hwc=self.hwc)

    def describe(self) -> str:
        return f"synthetic {self.size[1]}x{self.size[0]}"

    def close(self) -> None:
        pass


def _fit(frame: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """uint8, resized to WIDTH x HEIGHT unless they are 0 (native size) or already right."""
    from torchvision.transforms.v2 import functional as F

    if frame.dtype != torch.uint8:  # 16-bit PNGs and the like: the output is always rgb8 / mono8
        frame = F.to_dtype(frame, torch.uint8, scale=True)
    if not width or frame.shape[-2:] == (height, width):
        return frame
    return F.resize(frame, [height, width], antialias=True)


class OpenCVSource:
    """A V4L2/USB camera (SOURCE=camera) or a video file (SOURCE=video) through OpenCV."""

    pattern = False

    def __init__(self, config: CameraConfig, device: torch.device):
        try:
            import cv2
        except ImportError:
            raise SourceError(
                f"SOURCE={config.source}: needs OpenCV, which is not installed "
                "(pip install opencv-python-headless, or the checkout's extra: pip install '<checkout>[camera]')"
            ) from None
        self.cv2 = cv2
        self.config = config
        self.device = device
        self.is_camera = config.source == "camera"
        target = config.source_path
        if self.is_camera and target.isdigit():
            target = int(target)
        elif not self.is_camera and not Path(target).is_file():
            raise SourceError(f"SOURCE_PATH: expected a video file, got {config.source_path!r} (not found)")
        self.capture = cv2.VideoCapture(target)
        if not self.capture.isOpened():
            raise SourceError(f"SOURCE_PATH: OpenCV could not open {config.source_path!r} as a {config.source}")
        if self.is_camera and config.width:
            self.capture.set(cv2.CAP_PROP_FRAME_WIDTH, config.width)
            self.capture.set(cv2.CAP_PROP_FRAME_HEIGHT, config.height)
            self.capture.set(cv2.CAP_PROP_FPS, config.fps or 30)

    def describe(self) -> str:
        """The size frames leave with (WIDTH/HEIGHT, else what OpenCV reports) and, for a video,
        its length as its container says (some containers do not: then nothing is claimed)."""
        cv2, capture, config = self.cv2, self.capture, self.config
        width = config.width or int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
        height = config.height or int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
        size = f"{width}x{height}" if width > 0 and height > 0 else "size unknown"
        if self.is_camera:
            return f"camera {config.source_path}, {size}"
        frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        length = f", {frames} frames{' (looped)' if config.loop else ''}" if frames > 0 else ""
        return f"video {Path(config.source_path).name}, {size}{length}"

    CAMERA_RETRIES = 10  # a camera may fail a read now and then; a file that fails has ended

    def read(self, index: int) -> torch.Tensor | None:
        ok, bgr = self.capture.read()
        if not ok and self.config.loop and not self.is_camera:
            self.capture.set(self.cv2.CAP_PROP_POS_FRAMES, 0)
            ok, bgr = self.capture.read()
        for _ in range(self.CAMERA_RETRIES if self.is_camera and not ok else 0):
            time.sleep(0.01)
            ok, bgr = self.capture.read()
            if ok:
                break
        if not ok:
            return None
        pixels = torch.from_numpy(bgr).to(self.device)
        if pixels.dim() == 2:
            chw = pixels[None]
        else:
            chw = pixels.permute(2, 0, 1)[:3].flip(0)  # BGR(A) -> RGB
        return _fit(chw.contiguous(), self.config.width, self.config.height)

    def close(self) -> None:
        self.capture.release()


# torchvision 0.29 warns on every call of its image codecs (deprecated for TorchCodec's).
TORCHVISION_CODECS_DEPRECATED = "The image decoding and encoding capabilities of TorchVision are deprecated"


@functools.cache
def image_decoder() -> Callable[[bytes], torch.Tensor]:
    """The decoder of SOURCE=images: encoded bytes -> RGB (3, H, W) tensor, uint8 (uint16 for a
    16-bit PNG; _fit scales it), turned upright by the file's EXIF orientation.

    TorchCodec's decode_image where it imports; otherwise (an older torch, for which this
    TorchCodec has no build, or its native library fails to load) torchvision.io's, imported
    only then, asked for the same: EXIF orientation applied (TorchCodec always applies it),
    16-bit samples kept. Chosen once per process."""
    try:
        from torchcodec.decoders import decode_image
    except (ImportError, OSError, RuntimeError) as e:
        log.info("TorchCodec is not usable here (%s: %s): images are decoded by torchvision.io", type(e).__name__, e)
        return _torchvision_decode

    def decode(data: bytes) -> torch.Tensor:
        return decode_image(data, mode="RGB", output_dtype="auto")

    return decode


def _torchvision_decode(data: bytes) -> torch.Tensor:
    from torchvision.io import ImageReadMode, decode_image

    with warnings.catch_warnings():  # the fallback is deliberate: torchvision 0.29+ only gets here without TorchCodec
        warnings.filterwarnings("ignore", TORCHVISION_CODECS_DEPRECATED, DeprecationWarning)
        return decode_image(
            torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB, apply_exif_orientation=True
        )


def decode_image_file(path: Path) -> torch.Tensor:
    """One image file as an RGB (3, H, W) tensor. OSError where it cannot be read; ValueError or
    RuntimeError where it is not one decodable still image (empty, not JPEG/PNG/..., damaged,
    animated)."""
    data = path.read_bytes()
    if not data:
        raise ValueError("the file is empty")
    frame = image_decoder()(data)
    if frame.dim() != 3:  # an animated GIF/WebP (the format is read from the bytes, not the suffix)
        raise ValueError(f"expected a still image, got {frame.shape[0]} frames")
    return frame


class ImageFolderSource:
    """JPEG/PNG files of a folder in name order (SOURCE=images), decoded by TorchCodec
    (torchvision.io where TorchCodec is not available), upright by their EXIF orientation."""

    pattern = False

    def __init__(self, config: CameraConfig, device: torch.device):
        folder = Path(config.source_path)
        if not folder.is_dir():
            raise SourceError(f"SOURCE_PATH: expected a folder of images, got {config.source_path!r} (not a folder)")
        self.files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self.files:
            raise SourceError(
                f"SOURCE_PATH: expected {', '.join(IMAGE_SUFFIXES)} files in {config.source_path!r}, found none"
            )
        self.config = config
        self.device = device
        self.position = 0
        self.skipped = 0
        self.bad: set[Path] = set()

    def describe(self) -> str:
        size = f"{self.config.width}x{self.config.height}" if self.config.width else "each at its own size"
        looped = " (looped)" if self.config.loop else ""
        count = f"{len(self.files)} file{'' if len(self.files) == 1 else 's'}"
        return f"images in {Path(self.config.source_path).name}, {count}{looped}, {size}"

    def read(self, index: int) -> torch.Tensor | None:
        """The next decodable image; a file that does not read or decode is logged, counted, skipped."""
        for _ in range(len(self.files) + 1):
            if self.position >= len(self.files):
                if not self.config.loop or len(self.bad) == len(self.files):
                    return None
                self.position = 0
            path = self.files[self.position]
            self.position += 1
            if path in self.bad:
                continue
            try:
                frame = decode_image_file(path)
            except (OSError, RuntimeError, ValueError) as e:
                self.bad.add(path)
                self.skipped += 1
                log.warning("skipped %s: not a decodable image (%s)", path, e)
                continue
            return _fit(frame.to(self.device), self.config.width, self.config.height)
        return None

    def close(self) -> None:
        pass


def open_source(config: CameraConfig, device: torch.device) -> FrameSource:
    if config.source == "synthetic":
        return SyntheticSource(
            config.width,
            config.height,
            config.channels,
            device,
            hwc=config.format == "raw" or config.layout == "interleaved",
        )
    if config.source in ("camera", "video"):
        return OpenCVSource(config, device)
    return ImageFolderSource(config, device)
