"""Issue 31, items 2 and 3: the JPEG decoder bounds the work of any input before decoding it.

A progressive JPEG with one scan repeated passes a check that stops at the first scan, and costs
a decoder time linear in scans x pixels (8192x8192 with ~1,100 repeats: 42 s on this project's
2-core machine, for 700 KB); a few kilobytes declaring 8192x8192 decode to 192 MiB, more than the
node's output can carry. Each is refused here before any engine sees it, with the bound that
refused it named; good JPEGs beside them in the same batch still decode, and sane JPEGs of every
kind an encoder writes (baseline, progressive, grey, 4:2:0 / 4:2:2 / 4:4:4, restart intervals,
EXIF, multi-segment ICC profiles, comments) still pass.

No test decodes a hostile JPEG: engines that must not be reached are fakes that record calls."""

from __future__ import annotations

import io
import struct

import numpy as np
import pyarrow as pa
import pytest
import torch

from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.jpeg_header import (
    MAX_SCAN_PIXELS,
    MAX_SCANS,
    MAX_SEGMENTS,
    JpegError,
    read_header,
)
from tensor_codec_nodes.common.pattern import render
from tensor_codec_nodes.jpeg_decoder.decoder import JpegDecoder
from tests.support.jpeg import TORCHVISION_DEPRECATED, decoder_engine

MIB = 2**20
SEND_LIMIT = int(57.1 * MIB)  # what the campaign's node could send on `image`


# -- JPEGs, sane and hostile ----------------------------------------------------------------------


def pil_jpeg(height=96, width=128, channels=3, **options) -> bytes:
    """The test pattern as PIL writes it, with `options` (progressive, subsampling, exif, ...)."""
    from PIL import Image

    frame = render(0, height, width, channels=channels).permute(1, 2, 0).numpy()
    image = Image.fromarray(frame[..., 0] if channels == 1 else frame)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90, **options)
    return buffer.getvalue()


def with_size(data: bytes, height: int, width: int) -> bytes:
    """`data` with its frame header declaring height x width (the scans stay the small image's)."""
    out = bytearray(data)
    sof = next(i for i in range(len(out) - 1) if out[i] == 0xFF and out[i + 1] in (0xC0, 0xC1, 0xC2))
    out[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(out)


def repeat_last_scan(data: bytes, times: int) -> bytes:
    """A progressive JPEG with its last scan (an AC refinement: a few bytes) repeated `times` more
    times before the end-of-image marker, as the campaign built it: each copy is another pass
    over every block of its component."""
    last, end = data.rindex(b"\xff\xda"), len(data) - 2
    assert data[end:] == b"\xff\xd9"
    return data[:end] + data[last:end] * times + data[end:]


def repeat_to_size(data: bytes, size: int) -> bytes:
    last, end = data.rindex(b"\xff\xda"), len(data) - 2
    return repeat_last_scan(data, max(1, (size - len(data)) // (end - last)))


def with_comments(data: bytes, count: int) -> bytes:
    """`count` empty comment segments (ff fe 00 02) after the start-of-image marker."""
    return data[:2] + b"\xff\xfe\x00\x02" * count + data[2:]


def tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def event(data: bytes, frame: int) -> dict:
    metadata = {P.ENCODING: "jpeg", P.FRAME: frame}
    return {"type": "INPUT", "id": "jpeg", "value": pa.array(np.frombuffer(data, np.uint8)), "metadata": metadata}


class NoEngine:
    """An engine that must not be reached: it records each call and fails every JPEG it gets."""

    name, device = "none", torch.device("cpu")

    def __init__(self):
        self.calls: list[int] = []

    def decode(self, jpegs, channels):
        self.calls.append(len(jpegs))
        return [RuntimeError("the engine was reached") for _ in jpegs]


class Spy:
    """A real engine, each call's batch recorded: which JPEGs (by size) reached it."""

    def __init__(self, engine):
        self.engine, self.name, self.device = engine, engine.name, engine.device
        self.seen: list[list[int]] = []

    def decode(self, jpegs, channels):
        self.seen.append([j.numel() for j in jpegs])
        return self.engine.decode(jpegs, channels)


def refuse(decoder, data: bytes) -> str:
    """The reason the decoder's check gave for refusing `data` (it must refuse it)."""
    assert decoder.check(event(data, 7)) is None, "the JPEG was let through"
    assert decoder.stats.bad == 1 and "frame 7" in decoder.stats.failures[0]
    return decoder.stats.failures[0]


# -- item 2: scans and marker segments ------------------------------------------------------------


def test_a_progressive_jpeg_with_one_scan_repeated_is_refused_by_its_scan_count():
    hostile = repeat_last_scan(pil_jpeg(progressive=True), 200)
    engine = NoEngine()
    reason = refuse(JpegDecoder(engine), hostile)
    assert f"210 scans, expected at most {MAX_SCANS} (MAX_SCANS)" in reason, reason
    assert engine.calls == []


def test_the_campaigns_1_mb_jpeg_of_8192x8192_is_refused_without_reaching_the_engine():
    # The file: 8192x8192, one refinement scan repeated to ~1 MB (decoded as it is, ~40 s).
    hostile = repeat_to_size(with_size(pil_jpeg(progressive=True), 8192, 8192), 1 << 20)
    assert len(hostile) > 1_000_000
    engine = NoEngine()
    decoder = JpegDecoder(engine)
    assert decoder.check(event(hostile, 1)) is None
    assert engine.calls == [] and "(MAX_SCANS)" in decoder.stats.failures[0]


def test_scans_times_pixels_is_bounded_below_the_scan_count():
    # 8192x8192 with 20 scans: few enough scans, but each is a pass over 64 Mpx.
    hostile = repeat_last_scan(with_size(pil_jpeg(progressive=True), 8192, 8192), 10)
    with pytest.raises(JpegError) as refused:
        read_header(hostile, max_pixels=8192 * 8192)
    text = str(refused.value)
    assert "(MAX_SCAN_PIXELS)" in text and f"expected at most {MAX_SCAN_PIXELS}" in text, text
    # The decoder's setting moves the bound: a small image, refused at 5 x its pixels.
    reason = refuse(JpegDecoder(NoEngine(), max_scan_pixels=5 * 96 * 128), pil_jpeg(progressive=True))
    assert f"expected at most {5 * 96 * 128} (MAX_SCAN_PIXELS)" in reason, reason


def test_the_scan_bound_is_the_decoders_setting():
    data = pil_jpeg(progressive=True)  # 10 scans
    assert read_header(data).scans == 10
    reason = refuse(JpegDecoder(NoEngine(), max_scans=9), data)
    assert "10 scans, expected at most 9 (MAX_SCANS)" in reason, reason


def test_too_many_marker_segments_are_refused():
    hostile = with_comments(pil_jpeg(), 100_000)  # 400 KB of empty comments
    engine = NoEngine()
    reason = refuse(JpegDecoder(engine), hostile)
    assert f"expected at most {MAX_SEGMENTS} (MAX_SEGMENTS)" in reason, reason
    assert engine.calls == []
    reason = refuse(JpegDecoder(NoEngine(), max_segments=20), with_comments(pil_jpeg(), 20))
    assert "expected at most 20 (MAX_SEGMENTS)" in reason, reason


def test_fill_bytes_and_restart_markers_between_segments_cost_no_python_loop_per_byte():
    # 1 MB of fill bytes before a marker, and 1 MB of stray restart markers: each is one marker
    # (or a refused run of segments), never a million steps.
    data = pil_jpeg()
    filled = data[:2] + b"\xff" * (1 << 20) + data[2:]
    assert read_header(filled).width == 128
    restarts = data[:2] + b"\xff\xd0" * (1 << 19) + data[2:]
    with pytest.raises(JpegError, match=r"\(MAX_SEGMENTS\)"):
        read_header(restarts)


def test_the_counts_are_in_the_header_info():
    baseline = read_header(pil_jpeg())
    assert (baseline.scans, baseline.progressive) == (1, False)
    assert baseline.segments == 11  # SOI APP0 DQT DQT SOF DHTx4 SOS EOI
    grey = read_header(pil_jpeg(channels=1, progressive=True))
    assert grey.scans == 6  # libjpeg's default progression for one component


# -- item 3: the frame the output can carry -------------------------------------------------------


def test_a_3_kb_jpeg_declaring_8192x8192_is_refused_by_what_the_output_can_carry():
    bomb = with_size(pil_jpeg(56, 64), 8192, 8192)
    assert len(bomb) < 3 * 1024
    engine = NoEngine()
    decoder = JpegDecoder(engine, max_frame_bytes=SEND_LIMIT)
    reason = refuse(decoder, bomb)
    assert "decoded frame 8192x8192x3 = 192.0 MiB, expected at most 57.1 MiB" in reason, reason
    assert "`image`" in reason and "shared_memory_pool_size" in reason, reason
    assert engine.calls == []


def test_the_frame_bound_counts_the_channels_the_decoder_writes():
    # 4000x5000 grey is 19 MB as one channel and 57 MB as three: MODE decides.
    grey = with_size(pil_jpeg(56, 64, channels=1), 4000, 5000)
    limit = 4000 * 5000 * 2
    assert JpegDecoder(NoEngine(), "gray", max_frame_bytes=limit).check(event(grey, 0)) is not None
    reason = refuse(JpegDecoder(NoEngine(), "rgb", max_frame_bytes=limit), grey)
    assert "decoded frame 5000x4000x3" in reason, reason


def test_max_pixels_stays_a_setting_below_the_frame_bound():
    data = with_size(pil_jpeg(56, 64), 2000, 2000)
    reason = refuse(JpegDecoder(NoEngine(), max_pixels=1000 * 1000, max_frame_bytes=SEND_LIMIT), data)
    assert "(MAX_PIXELS)" in reason, reason


def test_the_decoder_says_its_effective_limits():
    decoder = JpegDecoder(NoEngine(), "auto", 64 * MIB, max_frame_bytes=SEND_LIMIT)
    text = decoder.limits()
    assert "frames up to 57.1 MiB" in text and f"at most {SEND_LIMIT // 3} px in RGB" in text, text
    assert f"MAX_SCANS={MAX_SCANS}" in text and f"MAX_SEGMENTS={MAX_SEGMENTS}" in text, text
    unbounded = JpegDecoder(NoEngine(), "auto", 1000).limits()
    assert "MAX_PIXELS=1000" in unbounded and "MiB a frame" not in unbounded, unbounded


# -- good frames behind hostile ones --------------------------------------------------------------


def test_good_jpegs_in_the_same_batch_as_hostile_ones_still_decode():
    good = [pil_jpeg(96, 128), pil_jpeg(96, 128, progressive=True), pil_jpeg(96, 128, channels=1)]
    hostile = [
        repeat_last_scan(pil_jpeg(progressive=True), 200),
        with_size(pil_jpeg(56, 64), 8192, 8192),
        with_comments(pil_jpeg(), 1000),
    ]
    events = [event(good[0], 0), event(hostile[0], 100), event(good[1], 1)]
    events += [event(hostile[1], 101), event(hostile[2], 102), event(good[2], 2)]
    engine = Spy(decoder_engine("auto", "cpu"))
    decoder = JpegDecoder(engine, max_frame_bytes=SEND_LIMIT)
    checked = [c for c in (decoder.check(e) for e in events) if c is not None]
    frames = decoder.decode(checked)
    assert [m[P.FRAME] for _, m in frames] == [0, 1, 2]
    assert [tuple(f.shape) for f, _ in frames] == [(3, 96, 128), (3, 96, 128), (1, 96, 128)]
    assert decoder.stats.bad == 3 and decoder.stats.decoded == 3
    assert engine.seen == [[len(g) for g in good]]  # one call, the good ones only


# -- sane JPEGs still pass ------------------------------------------------------------------------


def _exif() -> bytes:
    from PIL import Image

    exif = Image.Exif()
    exif[0x010F] = "camera"  # Make
    exif[0x0112] = 1  # Orientation: as stored
    return exif.tobytes()


SANE = {
    "baseline 4:2:0": dict(subsampling=2),
    "baseline 4:2:2": dict(subsampling=1),
    "baseline 4:4:4": dict(subsampling=0),
    "grey": dict(channels=1),
    "progressive": dict(progressive=True),
    "progressive 4:4:4": dict(progressive=True, subsampling=0),
    "progressive grey": dict(channels=1, progressive=True),
    "progressive optimised": dict(progressive=True, optimize=True),
    "restart every 2 MCUs": dict(restart_marker_blocks=2),
    "progressive, restart every row": dict(progressive=True, restart_marker_rows=1),
    "exif": dict(exif=_exif),
    "icc profile of 4 segments": dict(icc_profile=bytes(200_000)),
    "comment": dict(comment=b"made by a test"),
}


@pytest.mark.parametrize("options", SANE.values(), ids=SANE.keys())
def test_sane_jpegs_pass_and_decode(options):
    options = {k: v() if callable(v) else v for k, v in options.items()}
    data = pil_jpeg(96, 128, **options)
    info = read_header(data)
    assert (info.width, info.height) == (128, 96) and 1 <= info.scans <= 10 and info.segments <= 40
    decoder = JpegDecoder(decoder_engine("auto", "cpu"), max_frame_bytes=SEND_LIMIT)
    ((frame, _),) = decoder.decode([decoder.check(event(data, 0))])
    assert frame.shape[1:] == (96, 128) and decoder.stats.bad == 0


@TORCHVISION_DEPRECATED
@pytest.mark.parametrize("channels", [1, 3])
def test_torchvisions_jpegs_pass(channels):
    from torchvision.io import encode_jpeg

    data = encode_jpeg(render(0, 96, 128, channels=channels), quality=90)
    info = read_header(data)
    assert (info.width, info.height, info.components, info.scans) == (128, 96, channels, 1)


@pytest.mark.parametrize("height, width", [(4320, 7680), (8192, 8192)], ids=["8K UHD", "8192x8192"])
def test_a_sane_progressive_jpeg_of_8k_passes_the_work_bound(height, width):
    # libjpeg's 10 scans over the largest frame MAX_PIXELS admits: the header check only (the
    # scans are a small image's; what is checked is the count against the declared size).
    info = read_header(with_size(pil_jpeg(progressive=True), height, width), max_pixels=64 * MIB)
    assert (info.width, info.height, info.scans) == (width, height, 10)


def test_data_after_the_end_of_image_marker_is_not_walked():
    # A camera's padding, or a second image (an MPF preview) after the first one's EOI.
    data = pil_jpeg()
    assert read_header(data + bytes(40)).scans == 1
    assert read_header(data + pil_jpeg(56, 64)).width == 128


# -- the node: what its output carries ------------------------------------------------------------


def test_the_node_bounds_frames_by_what_image_carries(monkeypatch):
    import tensor_codec as tc
    from tensor_codec.dora import Link
    from tensor_codec_nodes.jpeg_decoder import node as decoder_node
    from tests.support.fakes import FakeNode

    fake = FakeNode(node_id="jpeg-decoder", inputs=["jpeg"], outputs=["image"], pool=8 * MIB)
    carried = tc.max_send_bytes(fake, "image")
    image = Link.of(fake).output("image")
    assert decoder_node.frame_bound(image, torch.device("cpu")) == carried < 64 * MIB
    # Frames sent by CUDA IPC stay in GPU memory: the message carries a handle, not the frame.
    monkeypatch.setattr(decoder_node, "_transport", lambda output, device: "cuda-ipc")
    assert decoder_node.frame_bound(image, torch.device("cuda")) is None
    monkeypatch.setattr(decoder_node, "_transport", lambda output, device: "host")
    assert decoder_node.frame_bound(image, torch.device("cuda")) == carried


def test_the_settings_defaults_are_the_header_checks_bounds():
    from tensor_codec_nodes.jpeg_decoder.config import load_config

    config = load_config({})
    assert (config.max_scans, config.max_segments, config.max_scan_pixels) == (
        MAX_SCANS,
        MAX_SEGMENTS,
        MAX_SCAN_PIXELS,
    )
