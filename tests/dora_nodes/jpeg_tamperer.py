"""Test node around the JPEG encoder and decoder: it sends the encoder good 1080p synthetic
frames with bad frames between them, and forwards the encoder's JPEGs to the decoder with a
corrupted copy after some of them. Everything good is numbered (seq 0..GOOD-1, count GOOD) so
the receiver can prove none was lost; the bad ones carry no seq, and the encoder and decoder
must log, count and skip each."""

import time

import numpy as np
import pyarrow as pa
import torch
from dora import Node
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.pattern import PATTERN_NAME, render

GOOD = 12
HEIGHT, WIDTH = 1080, 1920
BAD_FRAMES = {
    3: tv_tensors.Image(torch.zeros(3, 64, 64)),  # float
    6: tv_tensors.Image(torch.zeros(4, 64, 64, dtype=torch.uint8)),  # 4 channels
    9: torch.zeros(64, 64, dtype=torch.uint8),  # no channel dimension
}
CORRUPT_AFTER = {2: "truncated", 5: "bit flip", 8: "not a jpeg"}

node = Node()
schedule = []  # what each tick sends: good frame indices, or bad frames
for i in range(GOOD):
    if i in BAD_FRAMES:
        schedule.append(("bad", i))
    schedule.append(("good", i))
sent = forwarded = 0
last_send = None


def corrupt(data: bytes, how: str) -> bytes:
    if how == "truncated":
        return data[: len(data) // 3]
    if how == "bit flip":  # still ends in EOI and parses; only jpeg_crc32 can tell
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :]
    return b"GIF89a" + bytes(200)


for event in node:
    if event["type"] != "INPUT":
        continue
    if event["id"] == "tick" and sent < len(schedule):
        kind, i = schedule[sent]
        if kind == "good":
            frame = tv_tensors.Image(render(i, HEIGHT, WIDTH))
            meta = {
                P.SEQ: i,
                P.COUNT: GOOD,
                P.STREAM: "tamper",
                P.FRAME: i,
                P.PATTERN: PATTERN_NAME,
                P.CAPTURE_NS: P.now_ns(),
            }
            tc.send(node, "frames", frame, meta)
        else:
            tc.send(node, "frames", BAD_FRAMES[i], {P.FRAME: f"bad-{i}"})
        sent += 1
        last_send = time.monotonic()
    elif event["id"] == "jpeg":
        metadata = event["metadata"]
        data = event["value"].to_numpy(zero_copy_only=False).tobytes()
        node.send_output("jpeg", pa.array(np.frombuffer(data, np.uint8)), metadata)
        index = metadata.get(P.FRAME)
        if index in CORRUPT_AFTER:
            bad = {k: v for k, v in metadata.items() if k not in (P.SEQ, P.COUNT, P.STREAM)}
            bad[P.FRAME] = f"corrupt-{CORRUPT_AFTER[index]}"
            node.send_output("jpeg", pa.array(np.frombuffer(corrupt(data, CORRUPT_AFTER[index]), np.uint8)), bad)
        forwarded += 1
    if forwarded >= GOOD or (last_send is not None and sent == len(schedule) and time.monotonic() - last_send > 30):
        break
