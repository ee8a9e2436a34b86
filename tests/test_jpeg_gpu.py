"""The JPEG nodes on a GPU (failure mode 2): 4K frames encoded in a loop and from several threads
while other streams run heavy work, each frame written by a slow kernel right before it is handed
over; every JPEG must decode to its source within bounds. Also: nvJPEG against the CPU encoder,
and the decoder's fence against blocks still in use."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from torchvision.io import decode_jpeg, encode_jpeg

from tensor_codec_nodes.common.pattern import read_index, render
from tensor_codec_nodes.common.quality import compare
from tensor_codec_nodes.jpeg_decoder.engine import decode_batch
from tensor_codec_nodes.jpeg_encoder.engines import FENCE_DEFAULT_STREAM, FENCE_DEVICE_SYNC, CpuJpegEngine, CudaJpegEngine

pytestmark = pytest.mark.gpu

H, W = 2160, 3840
MIN_PSNR, MAX_MAD = 35.0, 3.0
SLOW = 20_000_000  # torch.cuda._sleep cycles: ~10 ms of a kernel queued before the frame's write


def cuda():
    return torch.device("cuda", torch.cuda.current_device())


def sources(n, channels=3):
    return {i: render(i, H, W, channels=channels) for i in range(n)}


def late_frame(source: torch.Tensor) -> torch.Tensor:
    """A fresh frame whose values are written only after a slow kernel on the current stream:
    an encoder that does not wait for the producer's stream reads stale or uninitialised memory."""
    frame = torch.empty(source.shape, dtype=torch.uint8, device=cuda())
    torch.cuda._sleep(SLOW)
    frame.copy_(source, non_blocking=True)
    return frame


def assert_close_to_source(jpeg: torch.Tensor, source: torch.Tensor, what: str):
    decoded = decode_jpeg(jpeg)
    if source.shape[0] == 1:
        decoded = decoded[:1] if decoded.shape[0] == 3 else decoded
    db, mad = compare(decoded, source)
    assert db >= MIN_PSNR and mad < MAX_MAD, f"{what}: {db:.2f} dB, mean abs diff {mad:.2f}, index {read_index(decoded)}"


def test_4k_frames_encoded_in_a_loop_of_200():
    src = sources(8)
    pinned = {i: s.pin_memory() for i, s in src.items()}
    engine = CudaJpegEngine(cuda(), 90, workers=2)
    try:
        futures = []
        for n in range(200):
            i = n % len(src)
            futures.append((n, i, engine.submit([late_frame(pinned[i])])))
            if len(futures) >= 8:
                n0, i0, f = futures.pop(0)
                assert_close_to_source(f.result()[0].data, src[i0], f"frame {n0}")
        for n0, i0, f in futures:
            assert_close_to_source(f.result()[0].data, src[i0], f"frame {n0}")
    finally:
        engine.close()


def test_4k_frames_from_4_threads_while_another_stream_runs_heavy_work():
    src = sources(4)
    pinned = {i: s.pin_memory() for i, s in src.items()}
    engine = CudaJpegEngine(cuda(), 90, workers=4)
    stop = threading.Event()
    errors: list[str] = []

    def heavy():
        stream = torch.cuda.Stream()
        a = torch.randn(4096, 4096, device=cuda())
        with torch.cuda.stream(stream):
            while not stop.is_set():
                for _ in range(8):
                    a = (a @ a).clamp_(-1, 1)
                stream.synchronize()

    def client(k):
        stream = torch.cuda.Stream()
        try:
            for n in range(25):
                i = (n + k) % len(src)
                with torch.cuda.stream(stream):
                    frame = late_frame(pinned[i])
                    future = engine.submit([frame])
                assert_close_to_source(future.result()[0].data, src[i], f"thread {k} frame {n}")
        except AssertionError as e:
            errors.append(str(e))

    busy = threading.Thread(target=heavy)
    busy.start()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stop.set()
        busy.join()
        engine.close()
    assert errors == []


def test_batched_and_greyscale_frames_on_the_gpu():
    rgb, grey = sources(4), sources(4, channels=1)
    engine = CudaJpegEngine(cuda(), 90, workers=1)
    try:
        out = engine.submit([late_frame(rgb[i].pin_memory()) for i in range(4)] + [late_frame(grey[i].pin_memory()) for i in range(4)]).result()
    finally:
        engine.close()
    for k, encoded in enumerate(out):
        assert_close_to_source(encoded.data, rgb[k] if k < 4 else grey[k - 4], f"batch item {k}")


def test_gpu_jpegs_against_the_cpu_encoder():
    src = sources(3)
    gpu, cpu = CudaJpegEngine(cuda(), 90, 1), CpuJpegEngine(90, 1)
    try:
        on_gpu = gpu.submit([s.to(cuda()) for s in src.values()]).result()
        on_cpu = cpu.submit(list(src.values())).result()
    finally:
        gpu.close()
        cpu.close()
    for i, (g, c) in enumerate(zip(on_gpu, on_cpu)):
        assert_close_to_source(g.data, src[i], f"gpu {i}")
        assert_close_to_source(c.data, src[i], f"cpu {i}")
        db, mad = compare(decode_jpeg(g.data), decode_jpeg(c.data))
        assert db >= MIN_PSNR and mad < MAX_MAD, (i, db, mad)


def test_nvjpeg_decode_is_fenced_against_blocks_still_in_use():
    """A block freed while a slow kernel on the stream still writes it is what the allocator hands
    the decoder next: without the fence nvJPEG's output is overwritten by that late write."""
    src = sources(3)
    jpegs = [encode_jpeg(s, quality=95) for s in src.values()]
    for k in range(10):
        scratch = torch.empty(3 * H * W, dtype=torch.uint8, device=cuda())
        torch.cuda._sleep(SLOW)
        scratch.fill_(7)
        del scratch  # freed with the fill still queued
        images = decode_batch(jpegs, [3, 3, 3], cuda())
        for i, image in enumerate(images):
            assert not isinstance(image, Exception), image
            db, mad = compare(image.cpu(), src[i])
            assert db >= MIN_PSNR and mad < MAX_MAD, (k, i, db, mad)


# ------------------------------------------------ torchvision's encoder fences the stream it was built on
# torchvision's CUDA encoder is one object per process, so these run in fresh processes.
FRESH_PROCESS_PRELUDE = """
import json, torch
from torchvision.io import decode_jpeg, encode_jpeg
from tensor_codec_nodes.jpeg_encoder.engines import CudaJpegEngine
dev = torch.device("cuda", torch.cuda.current_device())
"""


def in_a_fresh_process(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", FRESH_PROCESS_PRELUDE + textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_after_the_engine_starts_an_encode_from_any_stream_fences_the_default_stream():
    """The first-run probe, as a test: a long kernel queued on the default stream, then an encode
    on another stream. torchvision >= 0.22 host-waits, before encoding, on the stream its encoder
    was built on and makes that stream wait on its private one afterwards; the engine builds it on
    the default stream, so the kernel must be finished when the encode returns. Without that the
    encoder is built on whichever stream encodes first (here the side stream, in the engine a
    worker's), and other workers read JPEG bytes still being written."""
    got = in_a_fresh_process("""
        engine = CudaJpegEngine(dev, 90, workers=2)
        frame = torch.randint(0, 256, (3, 1080, 1920), dtype=torch.uint8, device=dev)
        torch.cuda.synchronize()
        default, side = torch.cuda.default_stream(dev), torch.cuda.Stream(dev)
        slept = torch.cuda.Event()
        with torch.cuda.stream(default):
            torch.cuda._sleep(2_000_000_000)  # about a second
            slept.record(default)
        with torch.cuda.stream(side):
            encode_jpeg(frame)
        fenced = slept.query()
        torch.cuda.synchronize()
        engine.close()
        print(json.dumps({"fence": engine.fence, "default_done_when_encode_returned": fenced}))
    """)
    assert got == {"fence": FENCE_DEFAULT_STREAM, "default_done_when_encode_returned": True}


def test_an_encoder_built_earlier_on_another_stream_is_detected_and_encodes_stay_correct():
    """Code in the same process used torchvision's encoder first, on a side stream: the engine's
    probe sees that the default stream is not fenced and falls back to a device-wide sync; frames
    written late by a slow kernel still encode to their source on every worker."""
    got = in_a_fresh_process("""
        from tensor_codec_nodes.common.pattern import render
        from tensor_codec_nodes.common.quality import compare
        side = torch.cuda.Stream(dev)
        with torch.cuda.stream(side):
            encode_jpeg(torch.zeros(3, 64, 64, dtype=torch.uint8, device=dev))
        torch.cuda.synchronize()
        engine = CudaJpegEngine(dev, 90, workers=3)
        sources = [render(i, 1080, 1920) for i in range(6)]
        futures = []
        for k, source in enumerate(sources * 4):
            frame = torch.empty(source.shape, dtype=torch.uint8, device=dev)
            torch.cuda._sleep(20_000_000)
            frame.copy_(source.pin_memory(), non_blocking=True)
            futures.append((k % len(sources), engine.submit([frame])))
        worst = min(compare(decode_jpeg(f.result()[0].data), sources[i])[0] for i, f in futures)
        engine.close()
        print(json.dumps({"fence": engine.fence, "worst_psnr": worst}))
    """)
    assert got["fence"] == FENCE_DEVICE_SYNC
    assert got["worst_psnr"] >= MIN_PSNR, got

