"""The hostile messages themselves (value, metadata), one builder per category of schedule.py,
made from the item's index and the run's seed alone (plus what the run has delivered so far),
so the same seed sends the same bytes. Runs inside the hostile node (torch, pyarrow, PIL)."""

from __future__ import annotations

import io
import json
import random
import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pyarrow as pa
import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec.digest import content_digest
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.pattern import PATTERN_NAME, render

from .schedule import FLOOD, Item

EMPTY = pa.array([], type=pa.uint8())
GOOD_STREAM = "fuzz-good"  # the good messages' stream (receiver and decoder targets)
NOBODY = "fuzz-nobody"  # a stream nothing sends: acks of it name nothing in flight
FLOOD_STREAM = "fuzz-flood"
HOUR_NS = 3600 * 10**9


def _rng(seed: int, item: Item) -> random.Random:
    return random.Random(f"tc-fuzz-nodes/{seed}/item/{item.index}")


def _bytes(data: bytes | bytearray) -> pa.Array:
    return pa.array(np.frombuffer(bytes(data), np.uint8))


# -- acks -------------------------------------------------------------------------------------


@dataclass
class AckContext:
    """What an acker knows when it forges: the producer's stream and count, and the messages it
    has acknowledged that every consumer has acknowledged too (seq -> the tx it echoed)."""

    stream: str
    count: int
    delivered: dict[int, int] = field(default_factory=dict)


def forge_ack(item: Item, ctx: AckContext, seed: int) -> tuple[pa.Array, dict]:
    if item.category is FLOOD:
        return EMPTY, {P.SEQ: item.index, P.STREAM: FLOOD_STREAM}
    rng = _rng(seed, item)
    seq = rng.randrange(max(ctx.count, 1))  # a seq of this run: malformed acks name real messages
    real = {P.SEQ: seq, P.STREAM: ctx.stream}
    name = item.category.name
    value = EMPTY
    if name == "stream a list":
        metadata = {P.SEQ: seq, P.STREAM: [ctx.stream, "x"]}
    elif name.startswith("stream a dict"):
        metadata = {P.SEQ: seq, P.STREAM: {ctx.stream * 5: seq}}
    elif name == "stream a 10 kB string":
        metadata = {P.SEQ: seq, P.STREAM: "s" * 10240}
    elif name == "stream an int":
        metadata = {P.SEQ: seq, P.STREAM: rng.randrange(1 << 40)}
    elif name == "seq a string":
        metadata = {**real, P.SEQ: str(seq)}
    elif name == "seq a bool":
        metadata = {**real, P.SEQ: True}
    elif name == "seq negative":
        metadata = {**real, P.SEQ: -rng.randrange(1, 2**63)}
    elif name == "seq a float":
        metadata = {**real, P.SEQ: float(seq)}
    elif name == "seq absent":
        metadata = {P.STREAM: ctx.stream}
    elif name == "seq a list":
        metadata = {**real, P.SEQ: [seq, seq]}
    elif name == "tx a list":
        metadata = {**real, P.TX: [1, 2]}
    elif name == "tx negative":
        metadata = {**real, P.TX: -rng.randrange(1, 2**63)}
    elif name == "tx a string":
        metadata = {**real, P.TX: "7"}
    elif name == "a stream nothing sent":
        metadata = {P.SEQ: seq, P.STREAM: NOBODY}
    elif name.startswith("stream a short dict"):
        metadata = {P.SEQ: seq, P.STREAM: {"s": seq}}
    elif name == "stream absent":
        metadata = {P.SEQ: seq}
    elif name == "this run's stream, seq past its count":
        metadata = {**real, P.SEQ: ctx.count + rng.randrange(1 << 30)}
    elif name == "this run's stream, seq and tx 2**63-1":
        metadata = {**real, P.SEQ: 2**63 - 1, P.TX: 2**63 - 1}
    elif name == "a message already acknowledged (late duplicate)":
        old = rng.choice(sorted(ctx.delivered))
        metadata = {P.SEQ: old, P.STREAM: ctx.stream, P.TX: ctx.delivered[old]}
    elif name == "a 64 kB value":
        value = pa.array(np.zeros(1 << 16, np.uint8))
        metadata = {P.SEQ: seq, P.STREAM: NOBODY}
    else:
        raise ValueError(f"no ack builder for category {name!r}")
    return value, metadata


# -- tensor_codec messages (the receiver) -------------------------------------------------------


def good_tensor(seq: int, count: int) -> tuple[pa.Array, dict]:
    """Good message `seq` of the good stream: checksummed, numbered, wanting an ack."""
    obj = torch.arange(256, dtype=torch.float32).reshape(16, 16) + seq
    value, codec = tc.encode(obj)
    return value, {
        **codec,
        P.SEQ: seq,
        P.COUNT: count,
        P.STREAM: GOOD_STREAM,
        P.CHECKSUM: content_digest(obj),
        P.CASE: "good",
        P.WANTS_ACK: True,
        P.SENT_NS: P.now_ns(),
    }


@lru_cache(maxsize=1)
def _broadcast() -> tuple[pa.Array, dict]:
    """16 GiB logically, 16 bytes on the wire: four 2**30-element float32 tensors, each one value
    expanded (4 GiB apiece, the codec's own per-tensor limit)."""
    obj = [torch.full((1,), float(j)).expand(1 << 30) for j in range(4)]
    return tc.encode(obj)


def forge_tensor(item: Item, next_seq: int, count: int, seed: int) -> tuple[pa.Array, dict]:
    """A hostile message sent just before good message `next_seq` (so next_seq - 1 was delivered)."""
    rng = _rng(seed, item)
    obj = torch.randn(8, 8, generator=torch.Generator().manual_seed(item.index))
    value, codec = tc.encode(obj)
    checksum = content_digest(obj)
    label = {P.CASE: f"hostile {item.index}: {item.category.name}"}
    plain = {**codec, P.CHECKSUM: checksum, **label}  # a good message but for its numbering
    numbered = {**plain, P.STREAM: GOOD_STREAM, P.COUNT: count}
    name = item.category.name
    if name == "seq 2**63-1":
        return value, {**numbered, P.SEQ: 2**63 - 1}
    if name == "seq negative":
        return value, {**numbered, P.SEQ: -rng.randrange(1, 2**63)}
    if name == "seq a string":
        return value, {**numbered, P.SEQ: str(next_seq)}
    if name == "count conflicting with the stream's":
        return value, {**numbered, P.SEQ: next_seq, P.COUNT: count + 1 + rng.randrange(1000)}
    if name == "seq past the stream's count":
        return value, {**numbered, P.SEQ: count + rng.randrange(1 << 20)}
    if name == "sent_ns -2**63":
        return value, {**plain, P.SENT_NS: -(2**63)}
    if name == "capture_ns an hour ahead":
        return value, {**plain, P.CAPTURE_NS: P.now_ns() + HOUR_NS}
    if name == "stream a list":  # with the seq of a message delivered: bad, not a duplicate
        return value, {**numbered, P.SEQ: next_seq - 1, P.STREAM: [GOOD_STREAM]}
    if name == "stream a 10 kB string":
        return value, {**numbered, P.SEQ: next_seq - 1, P.STREAM: "s" * 10240}
    if name == "header not JSON":
        return value, {**plain, "tc.header": "{not json"}
    if name == "header with a wrong nbytes":
        header = json.loads(codec["tc.header"])
        header["leaves"][0]["nbytes"] += 4
        return value, {**plain, "tc.header": json.dumps(header)}
    if name == "value truncated":
        return value.slice(0, len(value) - 8), plain
    if name == "no codec keys":
        return value, {k: v for k, v in plain.items() if not k.startswith("tc.")}
    if name == "header version 99":  # wire format 2 keeps its version in the header
        header = json.loads(codec["tc.header"])
        header["version"] = 99
        return value, {**plain, "tc.header": json.dumps(header, separators=(",", ":"))}
    if name == "a stray tc.version key (wire format 1)":  # refused whatever the header says
        return value, {**plain, "tc.version": 1}
    if name == "value an Arrow string array":
        return pa.array(["not", "bytes"]), plain
    if name == "wrong checksum":
        return value, {**plain, P.CHECKSUM: f"crc32:{int(checksum.split(':')[1], 16) ^ 1:08x}"}
    if name == "cuda-ipc transport without handles":  # the header names it; no tc.ipc.* keys
        header = json.loads(codec["tc.header"])
        header["transport"] = "cuda-ipc"
        return value, {**plain, "tc.header": json.dumps(header, separators=(",", ":"))}
    if name.startswith("16 GiB broadcast"):
        big, big_codec = _broadcast()
        return big, {**big_codec, P.CHECKSUM: "crc32:00000000", **label}
    if name == "a good message again":
        return good_tensor(next_seq - 1, count)
    if name == "corrupted, marked expect=reject":
        return value.slice(0, len(value) - 8), {**plain, P.EXPECT: P.REJECT}
    raise ValueError(f"no tensor builder for category {name!r}")


# -- JPEGs (the decoder) -----------------------------------------------------------------------

JPEG_HEIGHT, JPEG_WIDTH = 240, 320


@lru_cache(maxsize=64)
def _encoded(index: int) -> bytes:
    from torchvision.io import encode_jpeg

    return encode_jpeg(render(index, JPEG_HEIGHT, JPEG_WIDTH), quality=90).numpy().tobytes()


def _frame_numbering(seq: int, count: int, tx: int) -> dict:
    """What every good frame of the run carries, as the camera numbers it: its place in the good
    stream, the pattern it shows, and its copy's transmission (acknowledged)."""
    return {
        P.SEQ: seq,
        P.COUNT: count,
        P.STREAM: GOOD_STREAM,
        P.FRAME: seq,
        P.CAPTURE_NS: P.now_ns(),
        P.PATTERN: PATTERN_NAME,
        P.PATTERN_SIZE: f"{JPEG_WIDTH}x{JPEG_HEIGHT}",
        P.WANTS_ACK: True,
        P.TX: tx,
        P.SENT_NS: P.now_ns(),
    }


def good_jpeg(seq: int, count: int, tx: int) -> tuple[pa.Array, dict]:
    """Good JPEG `seq`: the test pattern's frame `seq`, with the metadata tc-jpeg-encoder sends
    (what the camera's frame carried, then encoding, size, channels, quality, subsampling, crc)."""
    data = _encoded(seq)
    return _bytes(data), {
        **_frame_numbering(seq, count, tx),
        **P.image_keys("jpeg", JPEG_WIDTH, JPEG_HEIGHT),
        P.CHANNELS: 3,
        P.QUALITY: 90,
        P.SUBSAMPLING: "420",
        P.JPEG_CRC32: zlib.crc32(data),
    }


@lru_cache(maxsize=4)
def _pil_jpeg(height: int, width: int, progressive: bool) -> bytes:
    from PIL import Image

    image = Image.fromarray(render(0, height, width).permute(1, 2, 0).numpy())
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90, progressive=progressive)
    return buffer.getvalue()


def _with_size(data: bytes, height: int, width: int) -> bytes:
    """`data` with its frame header declaring height x width (its scans stay the small image's)."""
    out = bytearray(data)
    sof = next(i for i in range(len(out) - 1) if out[i] == 0xFF and out[i + 1] in (0xC0, 0xC1, 0xC2))
    out[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(out)


def _repeat_last_scan(data: bytes, times: int) -> bytes:
    """A progressive JPEG with its last scan repeated `times` more times before end-of-image:
    each copy is one more pass of a decoder over every block."""
    last, end = data.rindex(b"\xff\xda"), len(data) - 2
    return data[:end] + data[last:end] * times + data[end:]


def forge_jpeg(item: Item, frame: int, seed: int) -> tuple[pa.Array, dict]:
    """A hostile JPEG message sent before good frame `frame`: no seq (nothing to acknowledge),
    its frame label naming it in the decoder's log."""
    rng = _rng(seed, item)
    data = _encoded(frame)
    crc = zlib.crc32(data)
    label = {P.FRAME: f"hostile-{item.index}", P.CAPTURE_NS: P.now_ns()}
    jpeg = {**label, P.ENCODING: "jpeg"}
    sized = {**jpeg, P.WIDTH: JPEG_WIDTH, P.HEIGHT: JPEG_HEIGHT, P.CHANNELS: 3, P.JPEG_CRC32: crc}
    name = item.category.name
    if name == "not a JPEG (GIF bytes)":
        return _bytes(b"GIF89a" + rng.randbytes(200)), jpeg
    if name == "empty":
        return EMPTY, jpeg
    if name == "truncated to a third":
        return _bytes(data[: len(data) // 3]), jpeg
    if name == "header declaring 8192x8192 (under 3 kB)":
        bomb = _with_size(_pil_jpeg(56, 64, False), 8192, 8192)
        return _bytes(bomb), {**jpeg, P.WIDTH: 8192, P.HEIGHT: 8192}
    if name == "progressive, one scan repeated 300 times":
        return _bytes(_repeat_last_scan(_pil_jpeg(96, 128, True), 300)), jpeg
    if name == "100,000 empty comment segments":
        return _bytes(data[:2] + b"\xff\xfe\x00\x02" * 100_000 + data[2:]), jpeg
    if name == "a bit flipped under jpeg_crc32":
        middle = len(data) // 2 + rng.randrange(len(data) // 4)
        flipped = data[:middle] + bytes([data[middle] ^ (1 << rng.randrange(8))]) + data[middle + 1 :]
        return _bytes(flipped), sized
    if name == "value an Arrow int64 array":
        return pa.array(np.frombuffer(data[: len(data) // 8 * 8], np.int64)), jpeg
    if name == "metadata: encoding png":
        return _bytes(data), {**sized, P.ENCODING: "png"}
    if name == "metadata: encoding an int":
        return _bytes(data), {**sized, P.ENCODING: 7}
    if name == "metadata: width a string":
        return _bytes(data), {**sized, P.WIDTH: str(JPEG_WIDTH)}
    if name == "metadata: height negative":
        return _bytes(data), {**sized, P.HEIGHT: -JPEG_HEIGHT}
    if name == "metadata: channels a string":
        return _bytes(data), {**sized, P.CHANNELS: "3"}
    if name == "metadata: channels a bool":
        return _bytes(data), {**sized, P.CHANNELS: True}
    if name == "metadata: channels 2":
        return _bytes(data), {**sized, P.CHANNELS: 2}
    if name == "metadata: jpeg_crc32 a string":
        return _bytes(data), {**sized, P.JPEG_CRC32: str(crc)}
    raise ValueError(f"no JPEG builder for category {name!r}")


# -- frames (the encoder) ----------------------------------------------------------------------


def good_frame(seq: int, count: int, tx: int) -> tuple[pa.Array, dict]:
    """Good frame `seq`: the test pattern as tc-camera-source sends it (a tv_tensors.Image through
    tensor_codec, with its numbering and pattern metadata)."""
    value, codec = tc.encode(tv_tensors.Image(render(seq, JPEG_HEIGHT, JPEG_WIDTH)))
    return value, {**codec, **_frame_numbering(seq, count, tx), P.PIXEL_FORMAT: "rgb8"}


def forge_frame(item: Item, frame: int, seed: int) -> tuple[pa.Array, dict]:
    """A hostile frame message sent before good frame `frame`: no seq, its frame label naming it."""
    rng = _rng(seed, item)
    label = {P.FRAME: f"hostile-{item.index}", P.CAPTURE_NS: P.now_ns()}
    pixels = render(frame, JPEG_HEIGHT, JPEG_WIDTH)
    name = item.category.name

    def codec(obj) -> tuple[pa.Array, dict]:
        value, metadata = tc.encode(obj)
        return value, {**metadata, **label}

    def raw(width: int, height: int, encoding: str = "rgb8") -> tuple[pa.Array, dict]:
        data = pixels.permute(1, 2, 0).contiguous().numpy().tobytes()
        return _bytes(data), {**label, **P.image_keys(encoding, width, height)}

    if name == "float32 pixels":
        return codec(tv_tensors.Image(pixels.float() / 255))
    if name == "bool pixels":
        return codec(tv_tensors.Image(pixels > 128))
    if name == "4 channels":
        return codec(tv_tensors.Image(torch.cat([pixels, pixels[:1]])))
    if name == "no channel dimension (H, W)":
        return codec(pixels[0])
    if name == "a 5-D tensor":
        return codec(pixels[None, None])
    if name == "empty (3, 0, 64)":
        return codec(tv_tensors.Image(torch.zeros(3, 0, 64, dtype=torch.uint8)))
    if name.startswith("a side over 65500 px"):
        return codec(tv_tensors.Image(torch.full((1, 1, 1), rng.randrange(256), dtype=torch.uint8).expand(3, 1, 70000)))
    if name == "a BoundingBoxes, not an Image":
        boxes = tv_tensors.BoundingBoxes(
            torch.tensor([[0, 0, 8, 8]], dtype=torch.uint8), format="XYXY", canvas_size=(JPEG_HEIGHT, JPEG_WIDTH)
        )
        return codec(boxes)
    if name == "a dict of tensors":
        return codec({"frame": tv_tensors.Image(pixels)})
    if name == "header not JSON":
        value, metadata = codec(tv_tensors.Image(pixels))
        return value, {**metadata, "tc.header": "{not json"}
    if name == "value truncated":
        value, metadata = codec(tv_tensors.Image(pixels))
        return value.slice(0, len(value) - 8), metadata
    if name == "no codec keys":
        value, metadata = codec(tv_tensors.Image(pixels))
        return value, {k: v for k, v in metadata.items() if not k.startswith("tc.")}
    if name == "raw rgb8 bytes, width says twice the bytes":
        return raw(2 * JPEG_WIDTH, JPEG_HEIGHT)
    if name == "raw rgb8 bytes, height negative":
        return raw(JPEG_WIDTH, -JPEG_HEIGHT)
    if name == "raw encoding yuv420":
        return raw(JPEG_WIDTH, JPEG_HEIGHT, "yuv420")
    raise ValueError(f"no frame builder for category {name!r}")
