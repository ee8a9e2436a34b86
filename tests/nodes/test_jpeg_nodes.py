"""The JPEG encoder, decoder and sink without dora: every JPEG decodes back to its source frame
within bounds (1080p and 4K, grey and RGB), bad frames and corrupt JPEGs are counted and
skipped with a reason, order and metadata survive, and the header check refuses hostile bytes."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest
import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.jpeg_header import JpegError, read_header
from tensor_codec_nodes.common.pattern import PATTERN_NAME, render
from tensor_codec_nodes.common.quality import compare
from tensor_codec_nodes.jpeg_decoder.decoder import JpegDecoder
from tensor_codec_nodes.jpeg_encoder.encoder import JpegEncoder
from tensor_codec_nodes.jpeg_sink.sink import JpegSink
from tensor_codec_nodes.tensor_receiver.receiver import Receiver
from tests.support.jpeg import decoder_engine, encoder_engine, reference_decode, reference_encode
from tests.support.jpeg_messages import codec_event, encoded, frame_event, jpeg_event
from tests.support.jpeg_messages import finish_encoder as finish

MIN_PSNR, MAX_MAD = 35.0, 3.0


def decode_jpeg(data):
    """As the JPEG is: 1 channel for a greyscale one, 3 otherwise."""
    return reference_decode(data, None)


def encode_jpeg(frame, quality=90):
    return reference_encode(frame, quality)


def cpu_decoder(*args, **kwargs):
    """The decoder node's logic on the CPU with ENGINE=auto."""
    return JpegDecoder(decoder_engine("auto", "cpu"), *args, **kwargs)


def run_encoder(events, *, quality=90, batch=4, workers=2):
    encoder = JpegEncoder(encoder_engine("auto", "cpu", quality, workers), quality, batch)
    out = []
    try:
        for event in events:
            encoder.accept(event)
            encoder.dispatch()
            out += encoder.collect()
        finish(encoder, out)
    finally:
        encoder.close()
    return encoder, out


# -- quality: every produced JPEG against its source frame ---------------------------------------


@pytest.mark.parametrize("height,width", [(1080, 1920), (2160, 3840)], ids=["1080p", "4k"])
@pytest.mark.parametrize("channels", [3, 1], ids=["rgb", "grey"])
def test_every_jpeg_decodes_to_its_source_within_bounds(height, width, channels):
    indices = [0, 1, 57, 1234]
    encoder, out = run_encoder([frame_event(i, height, width, channels) for i in indices])
    assert encoder.stats.encoded == len(indices) and encoder.stats.bad == encoder.stats.failed == 0
    assert [m[P.FRAME] for _, m in out] == indices  # input order
    for data, meta in out:
        assert (meta[P.ENCODING], meta[P.WIDTH], meta[P.HEIGHT], meta[P.CHANNELS], meta[P.QUALITY]) == (
            "jpeg",
            width,
            height,
            channels,
            90,
        )
        assert meta[P.JPEG_CRC32] == zlib.crc32(data.numpy())
        decoded = decode_jpeg(data)
        db, mad = compare(decoded, render(meta[P.FRAME], height, width, channels=channels))
        assert db >= MIN_PSNR and mad < MAX_MAD, (meta[P.FRAME], db, mad)


def test_lower_quality_means_smaller_files_and_still_a_readable_index():
    from tensor_codec_nodes.common.pattern import read_index

    sizes = {}
    for q in (30, 90):
        _, out = run_encoder([frame_event(7, 480, 640)], quality=q)
        sizes[q] = out[0][0].numel()
        assert read_index(decode_jpeg(out[0][0])) == 7
    assert sizes[30] < sizes[90] / 2


def test_metadata_is_carried_and_codec_keys_are_not():
    event = frame_event(3, 240, 320, **{P.CHECKSUM: "crc32:1", P.WANTS_ACK: True, "user_key": [1, 2]})
    _, out = run_encoder([event])
    ((_, meta),) = out
    assert (
        meta[P.FRAME] == 3
        and meta[P.CAPTURE_NS] == 1003
        and meta[P.PATTERN] == PATTERN_NAME
        and meta["user_key"] == [1, 2]
    )
    assert not any(k.startswith("tc.") for k in meta)
    assert P.CHECKSUM not in meta and P.WANTS_ACK not in meta


def test_plain_dora_image_messages_are_encoded_too():
    """bgr8 / rgb8 / mono8 flat bytes, as dora's own camera nodes send them."""
    source = render(11, 240, 320)
    events = []
    for encoding, hwc in (
        ("rgb8", source.permute(1, 2, 0)),
        ("bgr8", source.flip(0).permute(1, 2, 0)),
        ("mono8", source[:1].permute(1, 2, 0)),
    ):
        flat = pa.array(hwc.contiguous().reshape(-1).numpy())
        events.append(
            {
                "type": "INPUT",
                "id": "frames",
                "value": flat,
                "metadata": {P.ENCODING: encoding, P.WIDTH: 320, P.HEIGHT: 240, P.FRAME: encoding},
            }
        )
    encoder, out = run_encoder(events)
    assert encoder.stats.bad == 0 and len(out) == 3
    for data, meta in out:
        want = source[:1] if meta[P.FRAME] == "mono8" else source
        db, mad = compare(decode_jpeg(data), want)
        assert db >= MIN_PSNR and mad < MAX_MAD, meta


def test_many_frames_with_several_workers_keep_their_order():
    events = [frame_event(i, 240, 320, channels=1 + 2 * (i % 2)) for i in range(40)]
    encoder, out = run_encoder(events, batch=3, workers=3)
    assert [m[P.FRAME] for _, m in out] == list(range(40))
    assert encoder.stats.encoded == 40


@pytest.mark.parametrize(
    "obj, metadata, reason",
    [
        (tv_tensors.Image(torch.zeros(3, 8, 8)), {}, "frame.dtype: expected torch.uint8, got torch.float32"),
        (
            tv_tensors.Image(torch.zeros(4, 8, 8, dtype=torch.uint8)),
            {},
            "frame.shape[0] (channels): expected 1 or 3, got 4",
        ),
        (torch.zeros(8, 8, dtype=torch.uint8), {}, "frame.shape: expected (C, H, W), got (8, 8)"),
        (tv_tensors.Mask(torch.zeros(1, 8, 8, dtype=torch.uint8)), {}, "expected a torchvision.tv_tensors.Image"),
        ({"image": torch.zeros(3, 8, 8, dtype=torch.uint8)}, {}, "got builtins.dict"),
        (torch.zeros(3, 0, 8, dtype=torch.uint8), {}, "expected a non-empty image"),
    ],
    ids=["float", "4-channels", "2-d", "mask", "dict", "empty"],
)
def test_bad_frames_are_counted_and_skipped(obj, metadata, reason, caplog):
    good_before, good_after = frame_event(0, 240, 320), frame_event(1, 240, 320)
    encoder, out = run_encoder([good_before, codec_event(obj, {P.FRAME: 99}), good_after])
    assert [m[P.FRAME] for _, m in out] == [0, 1]
    assert encoder.stats.bad == 1 and reason in encoder.stats.failures[0]
    assert "frame 99" in caplog.text and reason in caplog.text


def test_undecodable_messages_are_counted_and_skipped():
    good = frame_event(0, 240, 320)
    truncated = dict(good, value=good["value"].slice(0, 100))
    plain_wrong_size = {
        "type": "INPUT",
        "id": "frames",
        "value": pa.array(np.zeros(10, np.uint8)),
        "metadata": {P.ENCODING: "rgb8", P.WIDTH: 4, P.HEIGHT: 4},
    }
    unknown = {
        "type": "INPUT",
        "id": "frames",
        "value": pa.array(np.zeros(10, np.uint8)),
        "metadata": {P.ENCODING: "yuv420"},
    }
    encoder, out = run_encoder([truncated, plain_wrong_size, unknown, frame_event(1, 240, 320)])
    assert [m[P.FRAME] for _, m in out] == [1]
    assert encoder.stats.bad == 3
    assert "expected 4x4x3 = 48 bytes" in " ".join(encoder.stats.failures)
    assert "metadata.encoding: expected one of rgb8, bgr8, mono8, got 'yuv420'" in " ".join(encoder.stats.failures)


def test_received_frames_are_released_once_encoded():
    """Frames may view dora's shared memory: they go back when their JPEG is done, not later."""
    event = frame_event(0, 240, 320)
    encoder = JpegEncoder(encoder_engine("auto", "cpu", 90, 1), 90, 1)
    try:
        encoder.accept(event)
        item = encoder.batches.pending[0]
        borrowed = item.borrowed
        assert tc.lifetimes.is_borrowed(borrowed)
        finish(encoder)
        assert not tc.lifetimes.is_borrowed(borrowed)
    finally:
        encoder.close()


# -- decoder ------------------------------------------------------------------------------------


def decode_all(decoder, events):
    checked = [c for c in (decoder.check(e) for e in events) if c is not None]
    return decoder.decode(checked)


def test_decoder_restores_frames_the_receiver_accepts():
    decoder = cpu_decoder()
    receiver = Receiver(torch.device("cpu"), inputs=["decoded"])
    events = [jpeg_event(*encoded(i, channels=c)) for i, c in ((0, 3), (1, 1), (2, 3))]
    for image, meta in decode_all(decoder, events):
        assert isinstance(image, tv_tensors.Image)
        assert meta[P.LOSSY] == "jpeg" and meta[P.QUALITY] == 90 and P.JPEG_CRC32 not in meta
        assert meta[P.PIXEL_FORMAT] == ("mono8" if image.shape[0] == 1 else "rgb8") and not P.IMAGE_KEYS & meta.keys()
        assert receiver.handle(codec_event(image, meta, "decoded")) == "good"
    assert decoder.stats.decoded == 3 and receiver.ok


def test_receiver_refuses_a_lossy_frame_outside_the_bounds():
    data, meta = encoded(5)
    decoder = cpu_decoder()
    ((image, meta),) = decode_all(decoder, [jpeg_event(data, meta)])
    noisy = image.clone()
    noisy[:, 100:] = torch.randint(0, 256, noisy[:, 100:].shape, dtype=torch.uint8)  # below the index strip
    receiver = Receiver(torch.device("cpu"), inputs=["decoded"])
    assert receiver.handle(codec_event(tv_tensors.Image(noisy), meta, "decoded")) == "bad"
    assert "expected PSNR >= 35 dB" in receiver.report()["inputs"]["decoded"]["failures"][0]


@pytest.mark.parametrize("mode, channels, want", [("auto", 1, 1), ("auto", 3, 3), ("rgb", 1, 3), ("gray", 3, 1)])
def test_decoder_modes(mode, channels, want):
    data, meta = encoded(channels=channels)
    ((image, out),) = decode_all(cpu_decoder(mode), [jpeg_event(data, meta)])
    assert image.shape[0] == want and out[P.PIXEL_FORMAT] == ("mono8" if want == 1 else "rgb8")


def test_auto_mode_without_metadata_follows_the_jpeg():
    grey, _ = encoded(channels=1)
    ((image, _),) = decode_all(cpu_decoder(), [jpeg_event(grey, {P.ENCODING: "jpeg"})])
    assert image.shape[0] == 1


def _bit_flipped(raw, meta):
    flipped = raw.clone()
    flipped[len(flipped) // 2] ^= 0x40
    return flipped, meta


def _bomb(raw, meta):
    """The header claims 60000x60000 pixels."""
    huge = bytearray(raw.numpy().tobytes())
    sof = huge.index(b"\xff\xc0")
    huge[sof + 5 : sof + 9] = struct.pack(">HH", 60000, 60000)
    return torch.frombuffer(huge, dtype=torch.uint8), {P.ENCODING: "jpeg"}


# (name, (good JPEG, its metadata) -> (corrupt data, metadata), the reason logged). The good JPEG
# is made when the test runs, not at collection: it is TorchCodec's, and the test skips without it.
CORRUPTIONS = [
    ("truncated", lambda raw, meta: (raw[: len(raw) // 2].clone(), meta), "end-of-image marker"),
    (
        "not a jpeg",
        lambda raw, meta: (torch.frombuffer(bytearray(b"\x89PNG" + bytes(100)), dtype=torch.uint8), meta),
        "start-of-image marker",
    ),
    (
        "empty",
        lambda raw, meta: (torch.empty(0, dtype=torch.uint8), meta),
        "expected at least 4 bytes (start- and end-of-image markers), got no bytes",
    ),
    ("bit flip", _bit_flipped, "crc32"),
    ("bomb", _bomb, "MAX_PIXELS"),
    ("wrong size", lambda raw, meta: (raw, {**meta, P.WIDTH: 640}), "metadata.width: says 640, the JPEG header 320"),
    ("not jpeg encoding", lambda raw, meta: (raw, {**meta, P.ENCODING: "png"}), "metadata.encoding: expected 'jpeg'"),
]


@pytest.mark.parametrize("corrupt, reason", [c[1:] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS])
def test_corrupt_jpegs_are_counted_and_skipped(corrupt, reason, caplog):
    data, meta = corrupt(*encoded(3))
    good0, good1 = jpeg_event(*encoded(0)), jpeg_event(*encoded(1))
    decoder = cpu_decoder(max_pixels=4096 * 4096)
    frames = decode_all(decoder, [good0, jpeg_event(data, {**meta, P.FRAME: 77}), good1])
    assert [m[P.FRAME] for _, m in frames] == [0, 1]
    assert decoder.stats.bad == 1 and reason in decoder.stats.failures[0], decoder.stats.failures
    assert "frame 77" in caplog.text


def test_a_jpeg_that_fails_inside_the_decoder_does_not_take_its_batch_with_it():
    good, meta = encoded(0)
    broken = good.clone()
    sos = bytes(broken.numpy()).index(b"\xff\xda")
    broken[sos + 4 :] = 0xFF  # header intact, scan data gone (and no EOI check: keep the tail)
    broken[-2:] = torch.tensor([0xFF, 0xD9], dtype=torch.uint8)
    decoder = cpu_decoder()
    events = [jpeg_event(good, meta), jpeg_event(broken, {P.ENCODING: "jpeg", P.FRAME: 9}), jpeg_event(*encoded(1))]
    frames = decode_all(decoder, events)
    assert [m[P.FRAME] for _, m in frames] == [0, 1]
    assert decoder.stats.bad == 1 and "decode:" in decoder.stats.failures[0]


# -- the header check ---------------------------------------------------------------------------


def test_header_of_baseline_progressive_and_grey_jpegs():
    from PIL import Image

    data, _ = encoded(0, 240, 320)
    info = read_header(data)
    assert (info.width, info.height, info.components, info.progressive) == (320, 240, 3, False)
    assert read_header(encoded(0, 240, 320, channels=1)[0]).components == 1
    buffer = io.BytesIO()
    Image.fromarray(render(0, 240, 320).permute(1, 2, 0).numpy()).save(
        buffer, format="JPEG", progressive=True, quality=80
    )
    info = read_header(buffer.getvalue())
    assert info.progressive and (info.width, info.height) == (320, 240)


def test_header_check_on_every_truncation_and_random_bytes_raises_only_jpeg_error():
    data = bytes(encoded(0, 64, 64)[0].numpy())
    rng = np.random.default_rng(0)
    for cut in range(0, len(data) - 1, 7):
        with pytest.raises(JpegError):
            read_header(data[:cut])
    for _ in range(300):
        noisy = bytearray(data)
        for i in rng.integers(0, len(noisy), size=8):
            noisy[i] = int(rng.integers(0, 256))
        try:
            read_header(bytes(noisy))
        except JpegError:
            pass


# -- sink ---------------------------------------------------------------------------------------


def test_sink_saves_the_first_count_jpegs_and_counts_bad_ones(tmp_path):
    sink = JpegSink(tmp_path / "jpeg", count=2, prefix="cam/../x")
    data, meta = encoded(0)
    sink.handle(jpeg_event(data, {**meta, P.FRAME: 0}))
    sink.handle(jpeg_event(data[:100].clone(), {**meta, P.FRAME: 1}))
    sink.handle(jpeg_event(*encoded(2)))
    sink.handle(jpeg_event(*encoded(3)))
    assert (sink.received, sink.saved, sink.bad) == (4, 2, 1)
    files = sorted(p.name for p in (tmp_path / "jpeg").iterdir())
    assert files == ["cam_.._x-000000.jpg", "cam_.._x-000002.jpg"]  # no path escapes DIR
    assert decode_jpeg(
        torch.frombuffer(bytearray((tmp_path / "jpeg" / files[0]).read_bytes()), dtype=torch.uint8)
    ).shape == (3, 240, 320)
