"""Reading a JPEG's structure without decoding it: every JPEG that arrives is checked here
before a decoder touches it, so a truncated or hostile file is refused with a reason, and one
that would cost a decoder more than it is worth is refused before the decoder starts: a header
that declares a huge image (a decompression bomb), too many scans (each is another pass over
every block of the image: a progressive JPEG with one scan repeated costs time linear in the
repeats, 42 s for 700 KB at 8192x8192), or too many marker segments.

The whole file is walked, segment by segment, up to its end-of-image marker; each scan's
entropy-coded data is skipped by one vectorised search for the marker that ends it, so the walk
costs a few milliseconds a megabyte whatever the bytes are."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import numpy as np
import torch

from . import protocol as P

__all__ = [
    "JpegError",
    "JpegInfo",
    "read_header",
    "read_own_header",
    "FrameHeader",
    "check_jpeg_message",
    "MAX_SCANS",
    "MAX_SEGMENTS",
    "MAX_SCAN_PIXELS",
]

# Start-of-frame markers (baseline, extended, progressive, lossless; Huffman or arithmetic).
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_PROGRESSIVE = {0xC2, 0xC6, 0xCA, 0xCE}
_STANDALONE = {0x01, *range(0xD0, 0xD8)}  # TEM and RSTn carry no length
_SOI, _SOS, _EOI = 0xD8, 0xDA, 0xD9
_TAIL = 64  # an encoder's EOI may be followed by a little padding
_FILL = re.compile(rb"\xff+")  # a marker's ff, and any fill bytes before it

# The bounds (the decoder node's settings of the same names override them; the other nodes that
# check JPEGs use these).
#
# Scans: libjpeg's default progression writes 10 for a colour JPEG, 6 for a grey one and 18 for
# CMYK, mozjpeg's optimised progressions and jpegtran's scripts a few more, a baseline JPEG 1 (3
# when its components are not interleaved). 64 leaves room for any scan script but an attack.
MAX_SCANS = 64
# Marker segments, SOI to EOI: a sane JPEG has a dozen (tables, frame, scans), a progressive one
# about 30 (a Huffman table before most scans), and EXIF, XMP and an ICC profile split into 64 KB
# segments add a few more. 512 is far beyond any of that and keeps the walk itself short.
MAX_SEGMENTS = 512
# Scans x pixels: what decoding a progressive JPEG costs is about linear in it (one repeated
# refinement scan of 8192x8192: ~40 ms per repeat on one core). 2**30 admits libjpeg's 10 scans
# over 8192x8192 (671 M) and 8K UHD's 32 Mpx with 32 scans, and 64 scans (MAX_SCANS) up to 16 Mpx;
# the most it lets through costs about as much as 16 passes over the largest frame MAX_PIXELS
# admits by default.
MAX_SCAN_PIXELS = 2**30


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
    scans: int = 1  # start-of-scan markers
    segments: int = 0  # markers, SOI and EOI included (fill bytes and restart markers inside scans are not)


@dataclass(frozen=True)
class FrameHeader:
    width: int
    height: int
    components: int
    progressive: bool
    subsampling: str


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
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8).data  # a memoryview of its bytes
    return memoryview(data).cast("B")


def _check_ends(b: memoryview) -> None:
    """The start-of-image marker first and an end-of-image marker in the last bytes."""
    n = len(b)
    if n >= 2 and (b[0] != 0xFF or b[1] != _SOI):
        raise JpegError(f"jpeg: expected the start-of-image marker ff d8, got {bytes(b[:4]).hex(' ')}")
    if n < 4:
        got = f"{n} byte{'s' if n > 1 else ''} ({bytes(b).hex(' ')})" if n else "no bytes"
        raise JpegError(f"jpeg: expected at least 4 bytes (start- and end-of-image markers), got {got}")
    if b"\xff\xd9" not in bytes(b[max(2, n - _TAIL) :]):
        raise JpegError(f"jpeg: expected the end-of-image marker ff d9 at the end ({n} bytes), got none: truncated")


def _next_marker(b: memoryview, i: int) -> tuple[int, int]:
    """-> (offset of its ff, marker) of the marker at byte i, past any fill bytes (one search,
    however many there are)."""
    fill = _FILL.match(b, i)
    if fill is None:
        got = f"{b[i]:#04x}" if i < len(b) else "the end of the data: truncated"
        raise JpegError(f"jpeg: expected a marker at byte {i}, got {got}")
    if fill.end() >= len(b):
        raise JpegError(f"jpeg: expected a marker at byte {i}, got fill bytes to the end of the data: truncated")
    return fill.end() - 1, b[fill.end()]


def _segment_length(b: memoryview, i: int, marker: int) -> int:
    n = len(b)
    if i + 4 > n:
        raise JpegError(f"jpeg: segment {marker:#04x} at byte {i} has no length: truncated")
    length = (b[i + 2] << 8) | b[i + 3]
    if length < 2 or i + 2 + length > n:
        raise JpegError(f"jpeg: segment {marker:#04x} at byte {i} declares {length} bytes, only {n - i - 2} left")
    return length


def _frame(b: memoryview, i: int, length: int, marker: int, max_pixels: int | None) -> FrameHeader:
    """The frame header (SOFn) at byte i, refused if it declares more than `max_pixels`."""
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
        raise JpegError(f"jpeg: {width}x{height} = {width * height} px, expected at most {max_pixels} (MAX_PIXELS)")
    if length < 8 + 3 * components:
        raise JpegError(
            f"jpeg: frame header at byte {i} is {length} bytes, expected {8 + 3 * components} for "
            f"{components} components"
        )
    factors = [(b[i + 11 + 3 * c] >> 4, b[i + 11 + 3 * c] & 15) for c in range(components)]
    return FrameHeader(width, height, components, marker in _PROGRESSIVE, _subsampling(factors))


def _ends_a_scan(following: np.ndarray) -> np.ndarray:
    """For the bytes after an ff: whether that ff starts a marker that ends entropy-coded data,
    i.e. the byte is not 00 (a stuffed ff), d0-d7 (a restart marker: inside a scan) or ff (fill)."""
    return (following != 0x00) & (following != 0xFF) & ((following & 0xF8) != 0xD0)


def _scan_ends(b: memoryview, start: int) -> np.ndarray:
    """The offset of every ff from `start` on that starts a marker ending a scan (and any ff pair
    inside a later segment, never searched past), in one vectorised pass: ff bytes are rare in
    an encoder's data (each is stuffed), so only those are looked at; where they are not (fill
    runs, stuffing without end: a hostile file) masks over every byte cost less."""
    tail = np.frombuffer(b, np.uint8)[start:]
    head, following = tail[:-1], tail[1:]
    is_ff = head == 0xFF
    if np.count_nonzero(is_ff) * 32 > len(head):
        return np.flatnonzero(is_ff & _ends_a_scan(following)) + start
    ff = np.flatnonzero(is_ff)
    return ff[_ends_a_scan(following[ff])] + start


def _end_of_scan(ends: np.ndarray, data: int, sos: int) -> int:
    """Where the scan whose entropy-coded data starts at byte `data` ends: the next marker."""
    k = int(np.searchsorted(ends, data))
    if k == len(ends):
        raise JpegError(f"jpeg: the scan at byte {sos} has no marker after its data: truncated")
    return int(ends[k])


def _scans_from(b: memoryview, ends: np.ndarray, i: int) -> int:
    """The start-of-scan markers from byte i on, counted in one pass (for a refusal's message)."""
    rest = ends[np.searchsorted(ends, i) :]
    return int(np.count_nonzero(np.frombuffer(b, np.uint8)[rest + 1] == _SOS))


def _check_scans(
    b: memoryview,
    ends: np.ndarray,
    i: int,
    scans: int,
    frame: FrameHeader,
    max_scans: int | None,
    max_scan_pixels: int | None,
) -> None:
    """Refuse at the first scan past a bound, naming the bound and how many scans there are."""
    pixels = frame.width * frame.height
    over_scans = max_scans is not None and scans > max_scans
    over_work = max_scan_pixels is not None and scans * pixels > max_scan_pixels
    if not (over_scans or over_work):
        return
    total = max(scans, scans - 1 + _scans_from(b, ends, i))
    if max_scans is not None and total > max_scans:
        raise JpegError(
            f"jpeg: {total} scans, expected at most {max_scans} (MAX_SCANS): each is another pass over the image"
        )
    raise JpegError(
        f"jpeg: {total} scans x {frame.width}x{frame.height} px = {total * pixels} scan-pixels, expected at most "
        f"{max_scan_pixels} (MAX_SCAN_PIXELS): decoding costs about that many pixel passes"
    )


def read_header(
    data,
    *,
    max_pixels: int | None = None,
    max_scans: int | None = MAX_SCANS,
    max_segments: int | None = MAX_SEGMENTS,
    max_scan_pixels: int | None = MAX_SCAN_PIXELS,
) -> JpegInfo:
    """The frame header and structure of the JPEG in `data` (bytes, a uint8 array or tensor),
    walked to its end-of-image marker; JpegError names what is wrong: not a JPEG, truncated, no
    frame header, or past a bound (None: unbounded) on its pixels, scans, scans x pixels or
    marker segments."""
    b = _bytes_of(data)
    _check_ends(b)
    frame: FrameHeader | None = None
    ends: np.ndarray | None = None
    scans, segments, i = 0, 1, 2  # the start-of-image marker is a segment
    while True:
        i, marker = _next_marker(b, i)
        segments += 1
        if max_segments is not None and segments > max_segments:
            raise JpegError(
                f"jpeg: more than {max_segments} marker segments (one more at byte {i}), expected at most "
                f"{max_segments} (MAX_SEGMENTS)"
            )
        if marker == _EOI:
            break
        if marker == _SOI:
            raise JpegError(f"jpeg: a second start-of-image marker at byte {i}, expected one")
        if marker in _STANDALONE:
            i += 2
            continue
        length = _segment_length(b, i, marker)
        if marker in _SOF:
            if frame is not None:
                raise JpegError(f"jpeg: a second frame header at byte {i}, expected one")
            frame = _frame(b, i, length, marker, max_pixels)
        elif marker == _SOS:
            if frame is None:
                break  # refused below: image data before any frame header
            scans += 1
            ends = _scan_ends(b, i) if ends is None else ends
            _check_scans(b, ends, i, scans, frame, max_scans, max_scan_pixels)
            i = _end_of_scan(ends, i + 2 + length, i)
            continue
        i += 2 + length
    if frame is None:
        raise JpegError(f"jpeg: expected a frame header (SOF marker) before the image data, got none in {len(b)} bytes")
    if scans == 0:
        raise JpegError(f"jpeg: expected a scan (SOS marker) before the end-of-image marker at byte {i}, got none")
    return JpegInfo(
        frame.width,
        frame.height,
        frame.components,
        frame.progressive,
        len(b),
        frame.subsampling,
        scans,
        segments,
    )


def read_own_header(data, *, max_segments: int = MAX_SEGMENTS) -> FrameHeader:
    """The frame header of a JPEG this process's own encoder has just written: its ends checked
    (start-of-image first, end-of-image in the last bytes: a truncated JPEG is refused) and its
    segments walked up to the frame header, not past it. It costs microseconds whatever the
    JPEG's size; read_header's walk of every scan costs about 0.4 ms a megabyte, which the
    encoder node would pay per frame for nothing (issue 34). Only for bytes this process made:
    a JPEG that arrives takes read_header (check_jpeg_message)."""
    b = _bytes_of(data)
    _check_ends(b)
    i = 2
    for _ in range(max_segments):
        i, marker = _next_marker(b, i)
        if marker in (_SOS, _EOI, _SOI):
            break
        if marker in _STANDALONE:
            i += 2
            continue
        length = _segment_length(b, i, marker)
        if marker in _SOF:
            return _frame(b, i, length, marker, None)
        i += 2 + length
    raise JpegError(f"jpeg: expected a frame header (SOF marker) before byte {i}, got none")


def check_jpeg_message(
    data: torch.Tensor,
    metadata: dict,
    *,
    max_pixels: int | None = None,
    max_scans: int | None = MAX_SCANS,
    max_segments: int | None = MAX_SEGMENTS,
    max_scan_pixels: int | None = MAX_SCAN_PIXELS,
) -> JpegInfo:
    """A JPEG message checked against itself and against what its metadata says: `encoding`,
    the markers, frame header and bounds (read_header), `width` / `height`, and `jpeg_crc32` when
    given (a bit flip in the scan data decodes without an error otherwise). JpegError names the
    field or the bound."""
    encoding = metadata.get(P.ENCODING)
    if encoding not in (None, "jpeg"):
        raise JpegError(f"metadata.encoding: expected 'jpeg', got {encoding!r}")
    info = read_header(
        data,
        max_pixels=max_pixels,
        max_scans=max_scans,
        max_segments=max_segments,
        max_scan_pixels=max_scan_pixels,
    )
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
