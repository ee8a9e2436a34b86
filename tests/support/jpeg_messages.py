"""The messages the JPEG nodes' tests feed them, without dora: frames as tensor_codec messages
(what the camera sends), JPEG messages (what the encoder sends), and collecting an encoder's
batches until every one is done."""

from __future__ import annotations

import zlib

import pyarrow as pa
import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.pattern import PATTERN_NAME, render
from tests.support.jpeg import reference_encode
from tests.support.waiting import wait_until


def codec_event(obj, metadata=None, input_id="frames"):
    value, meta = tc.encode(obj)
    meta.update(metadata or {})
    return {"type": "INPUT", "id": input_id, "value": value, "metadata": meta}


def frame_event(index, height, width, channels=3, **extra):
    """Frame `index` of the pattern as the camera sends it, with its seq, stream and capture time."""
    meta = {
        P.FRAME: index,
        P.SEQ: index,
        P.STREAM: "s",
        P.COUNT: 0,
        P.PATTERN: PATTERN_NAME,
        P.CAPTURE_NS: 1000 + index,
    }
    meta.update(extra)
    return codec_event(tv_tensors.Image(render(index, height, width, channels=channels)), meta)


def jpeg_event(data: torch.Tensor, metadata: dict):
    return {"type": "INPUT", "id": "jpeg", "value": pa.array(data.numpy()), "metadata": dict(metadata)}


def encoded(index=0, height=240, width=320, channels=3, quality=90):
    """A JPEG of frame `index` of the pattern (TorchCodec on the CPU) and the metadata the encoder
    node gives it."""
    data = reference_encode(render(index, height, width, channels=channels), quality)
    meta = {
        P.ENCODING: "jpeg",
        P.WIDTH: width,
        P.HEIGHT: height,
        P.CHANNELS: channels,
        P.QUALITY: quality,
        P.FRAME: index,
        P.PATTERN: PATTERN_NAME,
        P.JPEG_CRC32: zlib.crc32(data.numpy()),
    }
    return data, meta


def finish_encoder(encoder, out=None):
    """Collect until every batch is done (however slowly a busy machine encodes: a deadline that
    only bounds a hang, failing with what is still pending)."""
    out = [] if out is None else out

    def step():
        encoder.dispatch()
        out.extend(encoder.collect(0.05))
        return {"pending": len(encoder.batches.pending), "inflight": len(encoder.batches.inflight)}

    wait_until(
        step, lambda left: not any(left.values()), timeout=300, describe="the encoder to finish its batches", interval=0
    )
    return out
