"""The JPEG decoder node's decoding on WORKERS threads (issue 34): checking on the main thread,
decoding on the workers, frames out in input order and bit-exact with a decode on the caller's
thread; a batch whose worker fails costs its own JPEGs only; the JPEGs held stay under
2 x BATCH x WORKERS. The batching policy itself is the encoder's (test_jpeg_encoder_batching.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.pattern import render
from tensor_codec_nodes.jpeg_decoder.decoder import JpegDecoder
from tests.support.jpeg import decoder_engine, engine_params, reference_encode
from tests.support.jpeg_messages import encoded, jpeg_event
from tests.support.waiting import wait_until


def events(count: int, channels: int = 3) -> list[dict]:
    out = []
    for i in range(count):
        data, meta = encoded(i, 120, 160, channels=channels)
        out.append(jpeg_event(data, meta))
    return out


def run(decoder: JpegDecoder, messages: list[dict]) -> list:
    out = []
    for event in messages:
        decoder.accept(event)
        decoder.dispatch()
        out += decoder.collect()

    def step():
        decoder.dispatch()
        out.extend(decoder.collect(0.05))
        return decoder.busy

    wait_until(step, lambda busy: not busy, timeout=120, describe="the decoder to finish its batches", interval=0)
    return out


class ThreadNoted:
    """An engine that notes which thread decodes, then decodes with the real one."""

    def __init__(self, engine):
        self.engine = engine
        self.name, self.device = engine.name, engine.device
        self.threads: list[int] = []

    def decode(self, jpegs, channels):
        self.threads.append(threading.get_ident())
        return self.engine.decode(jpegs, channels)


@pytest.mark.parametrize("engine_name", engine_params("cpu"))
def test_workers_decode_what_the_main_thread_checked_in_input_order_bit_exact(engine_name):
    messages = events(9) + events(3, channels=1)
    engine = ThreadNoted(decoder_engine(engine_name, "cpu"))
    decoder = JpegDecoder(engine, batch=2, workers=2)
    try:
        out = run(decoder, messages)
    finally:
        decoder.close()
    direct = JpegDecoder(decoder_engine(engine_name, "cpu"))
    reference = direct.decode([direct.check(m) for m in messages])
    assert [m[P.FRAME] for _, m in out] == [m["metadata"][P.FRAME] for m in messages]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(out, reference))
    assert [f.shape[0] for f, _ in out] == [3] * 9 + [1] * 3
    assert engine.threads and threading.get_ident() not in engine.threads  # never on the main thread
    assert decoder.stats.decoded == 12 and decoder.stats.bad == 0 and decoder.held == 0


@pytest.mark.parametrize("engine_name", engine_params("cpu"))
def test_every_engine_decodes_on_two_threads_at_once(engine_name):
    """What WORKERS=2 does to an engine: two batches at a time, 50 times. nvImageCodec's one
    Decoder shared by two threads lost batches and corrupted the heap ("malloc(): unsorted double
    linked list corrupted"); each thread now has its own."""
    jpegs = [reference_encode(render(i, 240, 320)) for i in range(4)]
    engine = decoder_engine(engine_name, "cpu")
    alone = engine.decode(jpegs, [3] * 4)
    with ThreadPoolExecutor(2) as pool:
        for _ in range(50):
            for future in [pool.submit(engine.decode, jpegs, [3] * 4) for _ in range(2)]:
                got = future.result()
                assert all(torch.equal(a, b) for a, b in zip(got, alone)), [type(g).__name__ for g in got]


class FailsOnce:
    """The real engine, except that its second call fails whole (a worker's batch lost)."""

    name, device = "fails-once", torch.device("cpu")

    def __init__(self):
        self.engine = decoder_engine("auto", "cpu")
        self.calls = 0
        self.lock = threading.Lock()

    def decode(self, jpegs, channels):
        with self.lock:
            self.calls += 1
            call = self.calls
        if call == 2:
            raise RuntimeError("the worker's decoder broke")
        return self.engine.decode(jpegs, channels)


def test_a_batch_whose_worker_fails_costs_its_own_jpegs_only():
    decoder = JpegDecoder(FailsOnce(), batch=2, workers=1)
    try:
        out = run(decoder, events(6))
    finally:
        decoder.close()
    lost = 6 - len(out)
    assert 1 <= lost <= 2 and decoder.stats.bad == lost
    assert [m[P.FRAME] for _, m in out] == sorted(m[P.FRAME] for _, m in out)
    assert "decode: RuntimeError: the worker's decoder broke" in " ".join(decoder.stats.failures)


@pytest.mark.parametrize("batch,workers", [(1, 1), (4, 2)])
def test_the_jpegs_held_stay_under_twice_batch_times_workers(batch, workers):
    gate = threading.Event()

    class Held:
        name, device = "held", torch.device("cpu")

        def decode(self, jpegs, channels):
            gate.wait(30)
            return [torch.zeros(c, 120, 160, dtype=torch.uint8) for c in channels]

    decoder = JpegDecoder(Held(), batch=batch, workers=workers)
    try:
        accepted = 0
        for event in events(4 * batch * workers):
            if not decoder.can_accept:
                break
            assert decoder.accept(event)
            decoder.dispatch()
            accepted += 1
        assert accepted == decoder.held == 2 * batch * workers
        gate.set()
        out = run(decoder, [])
        assert len(out) == accepted and decoder.held == 0
    finally:
        gate.set()
        decoder.close()
