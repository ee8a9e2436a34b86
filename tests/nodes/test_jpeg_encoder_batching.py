"""How the JPEG encoder node keeps its engine busy (issue 34), held to structural contracts that
hold on any machine: a worker with nothing to do gets whatever is pending at once; while every
worker is busy, full batches queue behind them (one per worker) so a worker never waits for the
main thread; collect hands out new work before its bookkeeping; the frames held stay under
2 x BATCH x WORKERS; and the main thread, which also receives every frame, never walks a JPEG:
each one's header is read back on the worker that wrote it, up to its frame header only."""

from __future__ import annotations

import io
import threading
from concurrent.futures import Future

import pytest
import torch

import tensor_codec as tc
from tensor_codec_nodes.common import jpeg_header
from tensor_codec_nodes.common.jpeg_header import JpegError, read_header, read_own_header
from tensor_codec_nodes.common.pattern import render
from tensor_codec_nodes.jpeg_encoder.encoder import JpegEncoder
from tensor_codec_nodes.jpeg_encoder.engines.base import JpegEngine, finish
from tests.support.jpeg import encoder_engine
from tests.support.jpeg_messages import finish_encoder, frame_event


def pil_jpeg(frame: torch.Tensor, **options) -> bytes:
    """A JPEG by PIL (always installed with torchvision: these tests need no JPEG engine)."""
    from PIL import Image

    pixels = frame.permute(1, 2, 0).numpy()
    buffer = io.BytesIO()
    Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels).save(buffer, format="JPEG", **options)
    return buffer.getvalue()


JPEG = torch.frombuffer(bytearray(pil_jpeg(render(0, 56, 64))), dtype=torch.uint8)


class HeldEngine(JpegEngine):
    """An engine whose batches finish when the test says: each submit is a Future in `jobs`."""

    name = "held"
    subsampling = "420"

    def __init__(self, workers: int, log: list | None = None):
        self.device = torch.device("cpu")
        self.workers = workers
        self.jobs: list[tuple[int, Future]] = []
        self.log = log if log is not None else []

    def submit(self, frames):
        future = Future()
        self.jobs.append((len(frames), future))
        self.log.append(("submit", len(frames)))
        return future

    def sizes(self) -> list[int]:
        return [n for n, _ in self.jobs]

    def complete(self, k: int) -> None:
        n, future = self.jobs[k]
        future.set_result(finish([JPEG.clone() for _ in range(n)]))

    def close(self) -> None:
        pass


def accept(encoder: JpegEncoder, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        assert encoder.accept(frame_event(i, 56, 64))
        encoder.dispatch()


def test_an_idle_worker_gets_what_is_pending_at_once_and_busy_workers_get_full_batches_queued():
    engine = HeldEngine(workers=2)
    encoder = JpegEncoder(engine, 90, batch=4)
    accept(encoder, 2)
    assert engine.sizes() == [1, 1]  # each frame to a worker with nothing to do: no frame waits for a batch
    accept(encoder, 3, start=2)
    assert engine.sizes() == [1, 1]  # both busy: 3 frames are not a full batch
    accept(encoder, 1, start=5)
    assert engine.sizes() == [1, 1, 4]  # a full batch queued behind the busy workers
    accept(encoder, 4, start=6)
    assert engine.sizes() == [1, 1, 4, 4]  # one queued per worker
    accept(encoder, 4, start=10)
    assert engine.sizes() == [1, 1, 4, 4] and len(encoder.batches.pending) == 4  # no more than that queued
    assert encoder.held == 14 and encoder.can_accept
    accept(encoder, 2, start=14)
    assert encoder.held == 16 and not encoder.can_accept  # 2 x BATCH x WORKERS held: dora's queue holds the rest


def test_collect_hands_out_work_before_its_bookkeeping_and_keeps_input_order(monkeypatch):
    log: list = []
    engine = HeldEngine(workers=1, log=log)
    encoder = JpegEncoder(engine, 90, batch=2)
    release = tc.release
    monkeypatch.setattr(tc, "release", lambda obj: (log.append(("release",)), release(obj)))
    accept(encoder, 5)
    assert engine.sizes() == [1, 2]  # one running, one full batch queued (one per worker); frames 3, 4 pending
    engine.complete(1)  # the later batch finishes first: nothing comes out of order
    assert encoder.collect() == [] and engine.sizes() == [1, 2]
    engine.complete(0)
    log.clear()
    out = encoder.collect()
    assert [m["frame"] for _, m in out] == [0, 1, 2]
    assert log[0] == ("submit", 2)  # frames 3, 4 went to the engine before the finished frames were released
    assert log[1:] == [("release",)] * 3
    assert encoder.held == 2 and len(encoder.batches.pending) == 0


def test_a_jpeg_whose_header_cannot_be_read_back_is_counted_and_not_sent():
    engine = HeldEngine(workers=1)
    encoder = JpegEncoder(engine, 90, batch=2)
    accept(encoder, 1)
    _, future = engine.jobs[0]
    future.set_result(finish([JPEG[:-10].clone()]))  # truncated: no end-of-image marker
    out = encoder.collect()
    assert out == [] and encoder.stats.failed == 1
    assert "encoder wrote no readable JPEG: jpeg: expected the end-of-image marker" in encoder.stats.failures[0]


def test_a_batch_the_engine_refuses_at_submit_costs_its_own_frames_only():
    class RefusesSecond(HeldEngine):
        def submit(self, frames):
            if len(self.jobs) == 1 and not getattr(self, "refused", False):
                self.refused = True
                raise RuntimeError("no memory for this batch")
            return super().submit(frames)

    engine = RefusesSecond(workers=2)
    encoder = JpegEncoder(engine, 90, batch=4)
    accept(encoder, 3)  # frame 0 to worker 1; frame 1 refused at submit; frame 2 to worker 2
    assert engine.sizes() == [1, 1] and encoder.held == 3
    engine.complete(0)
    engine.complete(1)
    out = encoder.collect()
    assert [m["frame"] for _, m in out] == [0, 2]
    assert encoder.stats.failed == 1 and encoder.held == 0
    assert "frames 1: encoder: RuntimeError: no memory for this batch" in encoder.stats.failures[0]


def test_the_main_thread_never_walks_a_jpeg_the_workers_read_each_header_up_to_its_frame(monkeypatch):
    """A real CPU engine, 2 workers: every JPEG's frame header is read once, on a worker
    (read_own_header: microseconds whatever the JPEG's size); no scan is walked (read_header's
    walk costs about 0.4 ms a megabyte, and the main thread receives the next frames)."""
    main = threading.get_ident()
    frames: list[bool] = []  # a frame header read: on the main thread?
    walks: list[bool] = []  # a scan walked: on the main thread?

    def counted(where, fn):
        def wrapper(*args, **kwargs):
            where.append(threading.get_ident() == main)
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(jpeg_header, "_frame", counted(frames, jpeg_header._frame))
    monkeypatch.setattr(jpeg_header, "_scan_ends", counted(walks, jpeg_header._scan_ends))
    encoder = JpegEncoder(encoder_engine("auto", "cpu", 90, 2), 90, 2)
    try:
        out = []
        for i in range(6):
            encoder.accept(frame_event(i, 120, 160))
            encoder.dispatch()
            out += encoder.collect()
        finish_encoder(encoder, out)
    finally:
        encoder.close()
    assert [m["frame"] for _, m in out] == list(range(6))
    assert frames == [False] * 6 and walks == []
    assert {m["subsampling"] for _, m in out} == {"420"}


# -- read_own_header ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pil_jpeg(render(0, 240, 320)),
        pil_jpeg(render(1, 240, 320, channels=1)),
        pil_jpeg(render(2, 240, 320), progressive=True),
    ],
    ids=["baseline", "grey", "progressive"],
)
def test_read_own_header_says_what_read_header_says_of_the_frame(data):
    own, full = read_own_header(data), read_header(data)
    assert (own.width, own.height, own.components, own.progressive, own.subsampling) == (
        full.width,
        full.height,
        full.components,
        full.progressive,
        full.subsampling,
    )


def test_read_own_header_stops_at_the_frame_header_and_still_refuses_what_is_not_a_whole_jpeg():
    data = bytearray(bytes(JPEG.numpy()))
    sos = data.index(b"\xff\xda")
    scrambled = data[: sos + 20] + b"\xff\x00\xff" * 100 + data[sos + 20 :]  # scan data read_header rejects
    assert read_own_header(bytes(scrambled)).width == 64  # never looked at
    for bad, reason in [
        (data[:-10], "end-of-image"),
        (b"\x00" + data[1:], "start-of-image"),
        (data[:2] + data[sos:], "frame header"),  # scans with no frame header before them
    ]:
        with pytest.raises(JpegError, match=reason):
            read_own_header(bytes(bad))
