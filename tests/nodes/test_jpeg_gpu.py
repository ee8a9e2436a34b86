"""The JPEG engines on a GPU, each of them (torchcodec, torchvision, nvimgcodec where it imports):
batched and greyscale frames written late by a slow kernel, the GPU's JPEGs against the CPU's,
what each engine says it wrote (subsampling) against the JPEG's header, every decode engine's
fence against blocks still in use, and frames decoded on the decoder node's workers reaching its
stream intact. Seed failure 002 (the 200-frame loop, 4 threads under heavy
work) is in test_jpeg_seed_002.py, over the same engines."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
import torch

from tensor_codec_nodes.common.jpeg_header import read_header
from tensor_codec_nodes.common.pattern import render
from tensor_codec_nodes.common.quality import compare
from tensor_codec_nodes.jpeg_decoder.decoder import JpegDecoder
from tensor_codec_nodes.jpeg_encoder.engines.torchvision_engines import FENCE_DEFAULT_STREAM, FENCE_DEVICE_SYNC
from tests.support.jpeg import (
    MAX_MAD,
    MIN_PSNR,
    TORCHVISION_DEPRECATED,
    assert_close_to_source,
    decoder_engine,
    encoder_engine,
    engine_params,
    reference_decode,
    reference_encode,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

H, W = 2160, 3840
SLOW = 20_000_000  # torch.cuda._sleep cycles: ~10 ms of a kernel queued before the frame's write
GPU_ENGINES = pytest.mark.parametrize("engine_name", engine_params("cuda") if torch.cuda.is_available() else ["none"])


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


@GPU_ENGINES
def test_batched_and_greyscale_frames_on_the_gpu(engine_name):
    rgb, grey = sources(4), sources(4, channels=1)
    engine = encoder_engine(engine_name, cuda(), workers=1)
    try:
        out = engine.submit(
            [late_frame(rgb[i].pin_memory()) for i in range(4)] + [late_frame(grey[i].pin_memory()) for i in range(4)]
        ).result()
    finally:
        engine.close()
    for k, encoded in enumerate(out):
        source = rgb[k] if k < 4 else grey[k - 4]
        assert_close_to_source(encoded.data, source, f"{engine.describe()}: batch item {k}")
        header = read_header(encoded.data)
        if k < 4:
            assert header.subsampling == engine.subsampling, (k, header)


@GPU_ENGINES
@pytest.mark.parametrize("subsampling", ["auto", "420", "444"])
def test_gpu_jpegs_against_the_cpu_encoder(engine_name, subsampling):
    from tensor_codec_nodes.common.jpeg_engines import EngineError

    src = sources(3)
    try:
        gpu = encoder_engine(engine_name, cuda(), workers=1, subsampling=subsampling)
    except EngineError as e:
        pytest.skip(str(e))  # this engine writes one subsampling only (the CPU tests cover the refusal)
    try:
        on_gpu = gpu.submit([s.to(cuda()) for s in src.values()]).result()
    finally:
        gpu.close()
    for i, g in enumerate(on_gpu):
        assert_close_to_source(g.data, src[i], f"{gpu.describe()}: {i}")
        assert read_header(g.data).subsampling == gpu.subsampling
        db, mad = compare(reference_decode(g.data), reference_decode(reference_encode(src[i])))
        assert db >= MIN_PSNR and mad <= MAX_MAD, (i, db, mad)


@pytest.mark.parametrize("engine_name", engine_params("cuda") if torch.cuda.is_available() else ["none"])
def test_gpu_decode_is_fenced_against_blocks_still_in_use(engine_name):
    """A block freed while a slow kernel on the stream still writes it is what the allocator hands
    the decoder next: without the fence the decoder's output is overwritten by that late write."""
    src = sources(3)
    jpegs = [reference_encode(s, quality=95) for s in src.values()]
    engine = decoder_engine(engine_name, cuda())
    for k in range(10):
        scratch = torch.empty(3 * H * W, dtype=torch.uint8, device=cuda())
        torch.cuda._sleep(SLOW)
        scratch.fill_(7)
        del scratch  # freed with the fill still queued
        images = engine.decode(jpegs, [3, 3, 3])
        for i, image in enumerate(images):
            assert not isinstance(image, Exception), image
            assert image.device.type == "cuda"
            db, mad = compare(image.cpu(), src[i])
            assert db >= MIN_PSNR and mad <= MAX_MAD, (engine_name, k, i, db, mad)


@pytest.mark.parametrize("engine_name", engine_params("cuda") if torch.cuda.is_available() else ["none"])
def test_frames_decoded_on_the_workers_reach_the_node_stream_intact(engine_name):
    """The decoder node's path on a GPU (2 workers, each on its own stream): every frame is its
    source's within the bounds when the node's stream reads it late (a slow kernel first, as a send
    behind other work), although the workers go on decoding into freshly allocated blocks meanwhile:
    the frame's block is marked in use on the node's stream (record_stream), so the allocator gives
    it to no worker before that late read."""
    src = sources(4)
    messages = []
    for i, frame in src.items():
        data = reference_encode(frame, quality=95)
        metadata = {"encoding": "jpeg", "width": W, "height": H, "channels": 3, "frame": i}
        messages.append({"type": "INPUT", "id": "jpeg", "value": pa.array(data.numpy()), "metadata": metadata})
    decoder = JpegDecoder(decoder_engine(engine_name, cuda()), batch=2, workers=2)
    node_stream = torch.cuda.Stream(cuda())
    late = []
    try:
        with torch.cuda.stream(node_stream):
            for _ in range(3):
                for message in messages:
                    assert decoder.accept(message)
                    decoder.dispatch()
                while decoder.busy:
                    decoder.dispatch()
                    for image, metadata in decoder.collect(0.05):
                        torch.cuda._sleep(SLOW)
                        late.append((metadata["frame"], image.clone()))  # read after the sleep
                        del image
        node_stream.synchronize()
    finally:
        decoder.close()
    assert [i for i, _ in late] == [0, 1, 2, 3] * 3 and decoder.stats.bad == 0
    for i, frame in late:
        db, mad = compare(frame.cpu(), src[i])
        assert db >= MIN_PSNR and mad <= MAX_MAD, (engine_name, i, db, mad)


# ------------------------------------------------ torchvision's encoder fences the stream it was built on
# torchvision's CUDA encoder is one object per process, so these run in fresh processes.
FRESH_PROCESS_PRELUDE = """
import json, torch, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # torchvision's codecs, on purpose here
from torchvision.io import decode_jpeg, encode_jpeg
from tensor_codec_nodes.jpeg_encoder.engines.torchvision_engines import TorchvisionCudaEngine as CudaJpegEngine
dev = torch.device("cuda", torch.cuda.current_device())
"""


def in_a_fresh_process(code: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@TORCHVISION_DEPRECATED
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


@TORCHVISION_DEPRECATED
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
