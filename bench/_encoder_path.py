"""The JPEG encoder node's own loop minus dora, timed by phase (issue 34): what jpeg_fps.py's node
path and jpeg_node_standin.py run (with their baseline, `engine_alone`). The node's main thread
receives every frame and also hands batches to the engine and takes the JPEGs back, so where its
time goes per frame says where the node loses its engine:

    receive   waiting for the next message (the CUDA IPC producer's pipe; nothing for prepared events)
    accept    restoring and checking the frame (tc.receive, or a plain image's view)
    dispatch  handing batches to the engine
    wait      blocked on the oldest batch, the encoder full (frames held reach 2 x BATCH x WORKERS)
    collect   taking JPEGs back: releasing the frames, each JPEG's metadata

and how the batches came out (size -> how many), against the BATCH asked for."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from tensor_codec_nodes.jpeg_encoder.encoder import JpegEncoder

PHASES = ("receive", "accept", "dispatch", "wait", "collect")


@dataclass
class PathTiming:
    fps: float
    frames: int
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    batches: Counter = field(default_factory=Counter)

    def per_frame_us(self) -> dict[str, float]:
        return {k: v / self.frames * 1e6 for k, v in self.seconds.items()}

    def describe(self) -> str:
        phases = ", ".join(f"{k} {v:.0f}" for k, v in self.per_frame_us().items())
        sizes = " ".join(f"{size}x{count}" for size, count in sorted(self.batches.items()))
        return f"main thread per frame (us): {phases}; batches (size x count): {sizes}"


class _CountedSubmit:
    """The engine's submit, counting batch sizes (set on the instance, removed afterwards)."""

    def __init__(self, engine, batches: Counter):
        self.engine, self.batches, self.submit = engine, batches, engine.submit

    def __call__(self, frames):
        self.batches[len(frames)] += 1
        return self.submit(frames)


def engine_alone(engine, frames: list, n: int, batch: int) -> float:
    """The baseline: `n` frames through the engine's submit, batches of `batch` keeping every
    worker busy; frames per second overall."""
    start = time.perf_counter()
    inflight, done, k = [], 0, 0
    while done < n:
        while k < n and len(inflight) < engine.workers:
            chunk = [frames[(k + j) % len(frames)] for j in range(min(batch, n - k))]
            inflight.append(engine.submit(chunk))
            k += len(chunk)
        done += len(inflight.pop(0).result())
    return n / (time.perf_counter() - start)


def encoder_path(engine, batch: int, events, n: int, quality: int) -> PathTiming:
    """Encode the `n` frame messages `events` yields as the node does: accept -> dispatch ->
    collect, waiting on the oldest batch only while the encoder is full. Raises if any frame was
    refused or failed, or fewer than `n` JPEGs came out."""
    encoder = JpegEncoder(engine, quality, batch)
    timing = PathTiming(0.0, n)
    seconds = timing.seconds
    engine.submit = _CountedSubmit(engine, timing.batches)
    clock = time.perf_counter
    out = 0
    try:
        start = mark = clock()
        events = iter(events)
        for _ in range(n):
            event = next(events)
            now = clock()
            seconds["receive"] += now - mark
            mark = now
            while not encoder.can_accept:
                encoder.dispatch()
                now = clock()
                seconds["dispatch"] += now - mark
                out += len(encoder.collect(0.002))
                mark, now = now, clock()
                seconds["wait"] += now - mark
                mark = now
            encoder.accept(event)
            now = clock()
            seconds["accept"] += now - mark
            encoder.dispatch()
            mark, now = now, clock()
            seconds["dispatch"] += now - mark
            out += len(encoder.collect())
            mark, now = now, clock()
            seconds["collect"] += now - mark
            mark = now
        while encoder.busy:
            encoder.dispatch()
            out += len(encoder.collect(0.002))
        seconds["wait"] += clock() - mark
        timing.fps = n / (clock() - start)
    finally:
        del engine.submit
    if out != n or encoder.stats.bad or encoder.stats.failed:
        raise RuntimeError(f"node path: {encoder.stats.summary()}; {'; '.join(encoder.stats.failures[:2])}")
    return timing
