"""Reading a JPEG's frame header without decoding it: every JPEG that arrives is checked here
before a decoder touches it, so a truncated or hostile file is refused with a reason, and a
header that declares a huge image (a decompression bomb) is refused before memory is taken."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch

from . import protocol as P

__all__ = ["JpegError", "JpegInfo", "read_header", "check_jpeg_message"]

# Start-of-frame markers (baseline, extended, progressive, lossless; Huffman or arithmetic).
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_PROGRESSIVE = {0xC2, 0xC6, 0xCA, 0xCE}
_STANDALONE = {0x01, *range(0xD0, 0xD8)}  # TEM and RSTn carry no length
_SOS, _EOI = 0xDA, 0xD9
_TAIL = 64  # an encoder's EOI may be followed by a little padding


class JpegError(ValueError):
    """Bytes that are not a complete JPEG this project will decode."""


@dataclass(frozen=True)
class JpegInfo:
    width: int
    height: int
    components: int  # 1 = greyscale, 3 = YCbCr/RGB, 4 = CMYK
    progressive: bool
    size: int  # bytes
    subsampling: str = "gray"  # of the chroma: "gray" (one component), "444", "422", "420", "440", "411" or "other"


def _subsampling(factors: list[tuple[int, int]]) -> str:
    """The chroma subsampling named by the frame header's (horizontal, vertical) sampling factors."""
    if len(factors) == 1:
        return "gray"
    (h, v), rest = factors[0], factors[1:]
    if any(f != (1, 1) for f in rest):
        return "444" if all(f == factors[0] for f in rest) else "other"
    return {(1, 1): "444", (2, 1): "422", (2, 2): "420", (1, 2): "440", (4, 1): "411"}.get((h, v), "other")


def _bytes_of(data) -> memoryview:
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 1 or data.device.type != "cpu":
            raise JpegError(
                f"jpeg: expected a flat uint8 CPU tensor, got {data.dtype} of shape {tuple(data.shape)} on "
                f"{data.device}"
            )
        data = data.numpy() if data.is_contiguous() else data.contiguous().numpy()
    if isinstance(data, np.ndarray):
        return memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    return memoryview(data).cast("B")


def read_header(data, *, max_pixels: int | None = None) -> JpegInfo:
    """The frame header of the JPEG in `data` (bytes, a uint8 array or tensor); JpegError names
    what is wrong: not a JPEG, truncated, no frame header, or bigger than `max_pixels`."""
    b = _bytes_of(data)
    n = len(b)
    if n >= 2 and (b[0] != 0xFF or b[1] != 0xD8):
        raise JpegError(f"jpeg: expected the start-of-image marker ff d8, got {bytes(b[:4]).hex(' ')}")
    if n < 4:
        got = f"{n} byte{'s' if n > 1 else ''} ({bytes(b).hex(' ')})" if n else "no bytes"
        raise JpegError(f"jpeg: expected at least 4 bytes (start- and end-of-image markers), got {got}")
    tail = bytes(b[max(2, n - _TAIL) :])
    if b"\xff\xd9" not in tail:
        raise JpegError(f"jpeg: expected the end-of-image marker ff d9 at the end ({n} bytes), got none: truncated")
    i = 2
    while i + 4 <= n:
        if b[i] != 0xFF:
            raise JpegError(f"jpeg: expected a marker at byte {i}, got {b[i]:#04x}")
        marker = b[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _STANDALONE:
            i += 2
            continue
        if marker in (_SOS, _EOI):
            break
        length = (b[i + 2] << 8) | b[i + 3]
        if length < 2 or i + 2 + length > n:
            raise JpegError(f"jpeg: segment {marker:#04x} at byte {i} declares {length} bytes, only {n - i - 2} left")
        if marker in _SOF:
            if length < 8:
                raise JpegError(f"jpeg: frame header at byte {i} is {length} bytes, expected at least 8")
            height = (b[i + 5] << 8) | b[i + 6]
            width = (b[i + 7] << 8) | b[i + 8]
            components = b[i + 9]
            if width == 0 or height == 0:
                raise JpegError(f"jpeg: frame header declares {width}x{height}, expected a non-empty image")
            if components not in (1, 3, 4):
                raise JpegError(f"jpeg: frame header declares {components} components, expected 1, 3 or 4")
            if max_pixels is not None and width * height > max_pixels:
                raise JpegError(
                    f"jpeg: {width}x{height} = {width * height} px, expected at most {max_pixels} (MAX_PIXELS)"
                )
            if length < 8 + 3 * components:
                raise JpegError(
                    f"jpeg: frame header at byte {i} is {length} bytes, expected {8 + 3 * components} for "
                    f"{components} components"
                )
            factors = [(b[i + 11 + 3 * c] >> 4, b[i + 11 + 3 * c] & 15) for c in range(components)]
            return JpegInfo(width, height, components, marker in _PROGRESSIVE, n, _subsampling(factors))
        i += 2 + length
    raise JpegError(f"jpeg: expected a frame header (SOF marker) before the image data, got none in {n} bytes")


def check_jpeg_message(data: torch.Tensor, metadata: dict, *, max_pixels: int | None = None) -> JpegInfo:
    """A JPEG message checked against itself and against what its metadata says: `encoding`,
    the markers and frame header (read_header), `width` / `height`, and `jpeg_crc32` when given
    (a bit flip in the scan data decodes without an error otherwise). JpegError names the field."""
    encoding = metadata.get(P.ENCODING)
    if encoding not in (None, "jpeg"):
        raise JpegError(f"metadata.encoding: expected 'jpeg', got {encoding!r}")
    info = read_header(data, max_pixels=max_pixels)
    for key, value in ((P.WIDTH, info.width), (P.HEIGHT, info.height)):
        said = metadata.get(key)
        if said is not None and said != value:
            raise JpegError(f"metadata.{key}: says {said!r}, the JPEG header {value}")
    crc = metadata.get(P.JPEG_CRC32)
    if crc is not None:
        got = zlib.crc32(_bytes_of(data))
        if got != crc:
            raise JpegError(f"jpeg bytes: expected crc32 {crc} ({P.JPEG_CRC32}), got {got}: changed on the way")
    return info
