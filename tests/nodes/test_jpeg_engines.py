"""The JPEG engines on the CPU: how ENGINE=auto chooses and says why, SUBSAMPLING met or refused
by name, every engine's JPEGs within the bounds (PSNR >= 35 dB, mean absolute difference <= 3 at
quality 90) in every layout and subsampling it writes, what the header says against what the
engine claims, every decode engine's frames against the others', and EXIF orientation applied
alike by all of them."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
import torch

from tensor_codec_nodes.common import jpeg_engines
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.jpeg_engines import EngineError, choose_decoder, choose_encoder
from tensor_codec_nodes.common.jpeg_header import read_header
from tensor_codec_nodes.common.pattern import render
from tensor_codec_nodes.common.quality import compare
from tensor_codec_nodes.jpeg_decoder.decoder import JpegDecoder
from tests.support.jpeg import (
    MAX_MAD,
    MIN_PSNR,
    assert_close_to_source,
    decoder_engine,
    encoder_engine,
    engine_params,
    reference_decode,
    reference_encode,
)
from tests.support.optional import needs

needs_torchcodec = needs("torchcodec")  # the tests of what ENGINE=auto does with it, or of its engine


def only(*usable):
    """unavailable() as if only `usable` engines imported here."""
    return lambda name, device_type="cpu": None if name in usable else f"{name} is not installed (test)"


# -- choosing ------------------------------------------------------------------------------------


def test_auto_takes_torchcodec_on_the_cpu_and_nvimgcodec_first_on_cuda(monkeypatch):
    monkeypatch.setattr(jpeg_engines, "unavailable", only("torchcodec", "torchvision", "nvimgcodec"))
    cpu = choose_encoder("auto", "auto", "cpu")
    assert (cpu.name, cpu.subsampling, cpu.why) == ("torchcodec", "420", None)
    assert cpu.describe() == "engine=torchcodec subsampling=420"
    gpu = choose_encoder("auto", "auto", "cuda")
    assert (gpu.name, gpu.subsampling) == ("nvimgcodec", "420")
    assert choose_decoder("auto", "cuda").name == "nvimgcodec"
    assert choose_decoder("auto", "cpu").name == "torchcodec"


def test_auto_falls_back_and_says_why(monkeypatch):
    monkeypatch.setattr(jpeg_engines, "unavailable", only("torchvision"))
    gpu = choose_encoder("auto", "auto", "cuda")
    assert (gpu.name, gpu.subsampling) == ("torchvision", "444")
    assert "nvimgcodec passed over: nvimgcodec is not installed" in gpu.why
    assert "torchcodec passed over: torchcodec is not installed" in gpu.why
    assert gpu.describe().startswith("engine=torchvision subsampling=444 (auto: nvimgcodec passed over")
    assert "torchcodec passed over" in choose_decoder("auto", "cpu").why


def test_auto_picks_an_engine_that_writes_the_subsampling_asked_for(monkeypatch):
    monkeypatch.setattr(jpeg_engines, "unavailable", only("torchcodec", "torchvision", "nvimgcodec"))
    on_cpu = choose_encoder("auto", "444", "cpu")
    assert (on_cpu.name, on_cpu.subsampling) == ("nvimgcodec", "444")
    assert "torchcodec passed over: writes 420 only, SUBSAMPLING=444" in on_cpu.why
    assert choose_encoder("auto", "420", "cuda").name == "nvimgcodec"
    monkeypatch.setattr(jpeg_engines, "unavailable", only("torchcodec", "torchvision"))
    with pytest.raises(
        EngineError,
        match=(
            r"ENGINE=auto: no JPEG encoder on cpu can be used: torchcodec passed over: writes 420 only, "
            r"SUBSAMPLING=444"
        ),
    ):
        choose_encoder("auto", "444", "cpu")
    with pytest.raises(
        EngineError,
        match=(
            r"nvimgcodec passed over: nvimgcodec is not installed.*torchcodec passed over: writes 444 only, "
            r"SUBSAMPLING=420"
        ),
    ):
        choose_encoder("auto", "420", "cuda")


def test_an_engine_asked_for_by_name_that_cannot_serve_stops_with_the_setting_named(monkeypatch):
    monkeypatch.setattr(jpeg_engines, "unavailable", only("torchcodec", "torchvision"))
    with pytest.raises(EngineError, match=r"ENGINE=nvimgcodec: cannot be used on cuda: nvimgcodec is not installed"):
        choose_encoder("nvimgcodec", "auto", "cuda")
    with pytest.raises(
        EngineError,
        match=r"SUBSAMPLING=444: ENGINE=torchcodec on cpu writes 420 only; use SUBSAMPLING=auto, or ENGINE=nvimgcodec",
    ):
        choose_encoder("torchcodec", "444", "cpu")
    with pytest.raises(EngineError, match=r"SUBSAMPLING=420: ENGINE=torchvision on cuda writes 444 only"):
        choose_encoder("torchvision", "420", "cuda")
    with pytest.raises(EngineError, match=r"SUBSAMPLING: expected one of auto, 420, 444, got '422'"):
        choose_encoder("auto", "422", "cpu")
    with pytest.raises(
        EngineError, match=r"ENGINE: expected one of auto, torchcodec, torchvision, nvimgcodec, got 'pil'"
    ):
        choose_decoder("pil", "cpu")


@needs_torchcodec
def test_the_real_probe_here():
    """TorchCodec is a dependency (with a fallback): where it is installed the probe finds it, and
    auto takes it on the CPU."""
    assert jpeg_engines.unavailable("torchcodec", "cpu") is None
    assert choose_encoder("auto", "auto", "cpu").name == "torchcodec"


# -- every engine's JPEGs ------------------------------------------------------------------------


def layouts(frame: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same frame as the nodes receive it: planar (contiguous CHW) and interleaved (a CHW view
    of an HWC frame: the camera's LAYOUT=interleaved, a plain dora rgb8 message)."""
    return {"planar": frame, "interleaved": frame.permute(1, 2, 0).contiguous().permute(2, 0, 1)}


@pytest.mark.parametrize("engine_name", engine_params("cpu"))
@pytest.mark.parametrize("subsampling", ["auto", "420", "444"])
def test_every_engine_within_bounds_in_every_layout_and_subsampling_it_writes(engine_name, subsampling):
    try:
        engine = encoder_engine(engine_name, "cpu", subsampling=subsampling)
    except EngineError as e:
        assert subsampling == "444" and "writes 420 only" in str(e)
        return
    try:
        rgb, grey = render(3, 1080, 1920), render(4, 1080, 1920, channels=1)
        frames = [*layouts(rgb).values(), grey]
        out = engine.submit(frames).result()
    finally:
        engine.close()
    assert len(out) == 3
    for (data, *_), source, what in zip(out, [rgb, rgb, grey], ["planar", "interleaved", "grey"]):
        db, mad = assert_close_to_source(data, source, f"{engine.describe()} {what}")
        header = read_header(data)
        assert (header.width, header.height) == (1920, 1080)
        assert header.subsampling == ("gray" if what == "grey" else engine.subsampling), (what, header)
    assert engine.subsampling == ("420" if subsampling == "auto" else subsampling)


@pytest.mark.parametrize("engine_name", engine_params("cpu"))
def test_every_decode_engine_gives_the_frames_the_others_give(engine_name):
    rgb, grey = render(5, 480, 640), render(6, 480, 640, channels=1)
    jpegs = [reference_encode(rgb), reference_encode(grey)]
    engine = decoder_engine(engine_name, "cpu")
    rgb_out, grey_out = engine.decode(jpegs, [3, 1])
    assert rgb_out.shape == (3, 480, 640) and grey_out.shape == (1, 480, 640)
    assert rgb_out.dtype == grey_out.dtype == torch.uint8
    for mine, theirs, source in (
        (rgb_out, reference_decode(jpegs[0], 3), rgb),
        (grey_out, reference_decode(jpegs[1], 1), grey),
    ):
        db, mad = compare(mine, source)
        assert db >= MIN_PSNR and mad <= MAX_MAD
        assert compare(mine, theirs)[0] >= 45  # libjpeg-turbo everywhere here: (nearly) identical
    # A colour JPEG asked for in grey and the reverse: what the node's MODE does.
    as_grey, as_rgb = engine.decode(jpegs, [1, 3])
    assert as_grey.shape == (1, 480, 640) and as_rgb.shape == (3, 480, 640)


@pytest.mark.parametrize("engine_name", engine_params("cpu"))
def test_a_jpeg_that_fails_does_not_take_the_batch_with_it(engine_name):
    good = reference_encode(render(0, 64, 96))
    broken = good.clone()
    sos = bytes(broken.numpy()).index(b"\xff\xda")
    broken[sos + 4 :] = 0xFF
    broken[-2:] = torch.tensor([0xFF, 0xD9], dtype=torch.uint8)
    engine = decoder_engine(engine_name, "cpu")
    out = engine.decode([good, broken, good], [3, 3, 3])
    assert isinstance(out[0], torch.Tensor) and isinstance(out[2], torch.Tensor)
    assert isinstance(out[1], Exception)


# -- EXIF orientation ---------------------------------------------------------------------------


def with_exif_orientation(jpeg: torch.Tensor, orientation: int) -> torch.Tensor:
    """The JPEG with an APP1 Exif segment (little-endian TIFF, one IFD entry: Orientation) right
    after its start-of-image marker."""
    tiff = (
        b"II*\x00"
        + struct.pack("<I", 8)
        + struct.pack("<H", 1)
        + struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0)
        + struct.pack("<I", 0)
    )
    body = b"Exif\x00\x00" + tiff
    segment = b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body
    data = bytes(jpeg.numpy())
    return torch.frombuffer(bytearray(data[:2] + segment + data[2:]), dtype=torch.uint8)


@pytest.mark.parametrize("engine_name", engine_params("cpu"))
def test_every_decode_engine_applies_exif_orientation_and_the_node_accepts_the_turned_frame(engine_name):
    source = render(7, 48, 80)
    plain = reference_encode(source)
    turned = with_exif_orientation(plain, 6)  # 6: rotate 90 degrees clockwise to view
    assert read_header(turned).width == 80
    engine = decoder_engine(engine_name, "cpu")
    (image,) = engine.decode([turned], [3])
    assert image.shape == (3, 80, 48), f"{engine_name} did not apply the EXIF orientation"
    assert compare(image, torch.rot90(reference_decode(plain), k=-1, dims=(1, 2)))[0] >= 45
    decoder = JpegDecoder(engine)
    checked = decoder.check(
        {"type": "INPUT", "id": "jpeg", "value": pa.array(turned.numpy()), "metadata": {P.ENCODING: "jpeg"}}
    )
    ((frame, _),) = decoder.decode([checked])
    assert frame.shape == (3, 80, 48) and decoder.stats.bad == 0


@needs_torchcodec
def test_torchcodec_writes_the_same_bytes_through_its_memory_file_and_to_tensor():
    """Frames from 4 Mpx on go through a memfd (no GIL taken mid-encode), smaller ones through
    to_tensor: the same JPEG either way, and the memory files are closed with the engine."""
    frame = render(9, 480, 640).permute(1, 2, 0).contiguous().permute(2, 0, 1)
    engine = encoder_engine("torchcodec", "cpu", workers=1)
    try:
        (small,) = engine.submit([frame]).result()
        engine.memory_file_min_pixels = 1
        (through_file,) = engine.submit([frame]).result()
        opened = list(engine._files)
    finally:
        engine.close()
    assert torch.equal(small.data, through_file.data) and small.crc32 == through_file.crc32
    assert torch.equal(small.data, reference_encode(frame))
    import os

    assert opened and all(
        not os.path.exists(f"/proc/self/fd/{fd}") or os.readlink(f"/proc/self/fd/{fd}").find("tc-jpeg") < 0
        for fd in opened
    )


@needs_torchcodec
@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
def test_torchcodec_on_cuda_waits_for_the_frame_before_nvjpeg_reads_it(monkeypatch, layout):
    """On an H100, TorchCodec 0.16 encoded a frame from stale memory while other streams were busy
    (1 in ~100), also with the worker's stream host-synchronised first: that stream held only the
    wait on the frames' event (issue 37). The worker now waits on the host for the frames' event
    itself, and for its stream only where it queued a copy there, before the encoder is called
    (the CUDA calls are stood in for: no GPU here)."""
    from contextlib import nullcontext

    from tensor_codec_nodes.jpeg_encoder.engines import torchcodec_engines

    calls = []

    class Stream:
        def wait_event(self, event):
            calls.append("worker stream waits on the frames' event")

        def synchronize(self):
            calls.append("worker stream synchronized")

    class Event:
        def synchronize(self):
            calls.append("frames' event synchronized")

    class Encoder:
        def __init__(self, frame):
            calls.append("encoder made")

        def to_file_like(self, sink, quality):
            calls.append("encoded")
            sink.write(b"\xff\xd8\xff\xd9")

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "device", lambda device: nullcontext())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: nullcontext())
    monkeypatch.setattr(torchcodec_engines, "JpegEncoder", Encoder)
    engine = torchcodec_engines.TorchCodecEngine(torch.device("cuda", 0), 90, 1)
    engine.stream = lambda: Stream()
    frame = torch.zeros(3, 16, 16, dtype=torch.uint8)
    if layout == "interleaved":  # the camera's layout: made contiguous (a copy) on the worker's stream
        frame = torch.zeros(16, 16, 3, dtype=torch.uint8).permute(2, 0, 1)
    try:
        (encoded,) = engine._run_cuda([frame], Event())
    finally:
        engine.close()
    made = ["worker stream synchronized"] if layout == "interleaved" else []
    assert calls == [
        "worker stream waits on the frames' event",
        "frames' event synchronized",
        *made,
        "encoder made",
        "encoded",
    ]
    assert bytes(encoded.data.numpy()) == b"\xff\xd8\xff\xd9"


@needs_torchcodec
def test_a_node_that_cannot_start_its_engine_says_why_and_gets_none(caplog):
    import logging

    log = logging.getLogger("jpeg-test")
    pil = lambda f: choose_encoder("pil", "auto", "cpu")  # noqa: E731
    assert jpeg_engines.start_engine(log, "pil", "cpu", pil, lambda c: 1) is None
    assert "ENGINE: expected one of auto, torchcodec, torchvision, nvimgcodec, got 'pil'" in caplog.text

    def broken(choice):
        raise RuntimeError("CUDA error: out of memory")

    assert (
        jpeg_engines.start_engine(log, "auto", "cuda:0", lambda f: choose_encoder("torchcodec", "auto", "cpu"), broken)
        is None
    )
    assert "ENGINE=auto: torchcodec could not start on cuda:0: RuntimeError: CUDA error: out of memory" in caplog.text

    def unlucky(failed):
        raise OSError("libnvjpeg.so.13: cannot open shared object file")

    assert jpeg_engines.start_engine(log, "auto", "cpu", unlucky, broken) is None
    assert "ENGINE=auto: the JPEG library could not start on cpu: OSError: libnvjpeg" in caplog.text
    choice, engine = jpeg_engines.start_engine(
        log, "auto", "cpu", lambda f: choose_encoder("auto", "auto", "cpu", f), lambda c: "made"
    )
    assert (choice.name, engine) == ("torchcodec", "made")


@pytest.mark.parametrize("role", ["encoder", "decoder"])
def test_auto_passes_over_an_engine_that_imports_but_cannot_start(monkeypatch, caplog, role):
    """On the H100 with nvImageCodec installed, auto chose it on CUDA and its encoder could not be
    created there (issue 37): the node would have exited. Auto now takes the next engine and says
    why; an engine asked for by name still fails with its own words."""
    import logging

    monkeypatch.setattr(jpeg_engines, "unavailable", only("torchcodec", "torchvision", "nvimgcodec"))
    log = logging.getLogger("jpeg-test")
    made = []

    def make(choice):
        made.append(choice.name)
        if choice.name == "nvimgcodec":
            raise RuntimeError("Internal error - Could not create encoder. Code: 7")
        return f"{choice.name} engine"

    def choose(setting):
        if role == "encoder":
            return lambda failed: choose_encoder(setting, "auto", "cuda", failed)
        return lambda failed: choose_decoder(setting, "cuda", failed)

    choice, engine = jpeg_engines.start_engine(log, "auto", "cuda:0", choose("auto"), make)
    assert made == ["nvimgcodec", "torchcodec"] and engine == "torchcodec engine"
    assert "nvimgcodec passed over: could not start: RuntimeError: Internal error - Could not create" in choice.why
    assert "could not start" in choice.describe()  # in the start-up line, and as a warning:
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "ENGINE=auto: nvimgcodec could not start on cuda:0 (RuntimeError: " in warning.getMessage()
    assert warning.getMessage().endswith("; using torchcodec")
    caplog.clear()
    made.clear()
    assert jpeg_engines.start_engine(log, "nvimgcodec", "cuda:0", choose("nvimgcodec"), make) is None
    assert made == ["nvimgcodec"]
    assert "ENGINE=nvimgcodec: nvimgcodec could not start on cuda:0: RuntimeError: Internal error" in caplog.text


class FakeNv:
    """nvImageCodec's BackendKind/Backend as the backend chooser sees them; a codec with any of the
    `refused` kinds raises as 0.9.0.20 did on the H100 (issue 37)."""

    class BackendKind:
        CPU_ONLY, GPU_ONLY, HYBRID_CPU_GPU, HW_GPU_ONLY = "cpu", "gpu", "hybrid", "hw"

    def __init__(self, refused=(), together=True):
        self.refused = set(refused)
        self.together = together  # several backends in one codec can be created
        self.tried = []

    def Backend(self, kind):  # noqa: N802 (nvImageCodec's name)
        return kind

    def make(self, backends):
        self.tried.append("+".join(backends))
        if self.refused & set(backends) or (len(backends) > 1 and not self.together):
            raise RuntimeError("Internal error - Could not create encoder. Code: 7")
        return f"codec on {'+'.join(backends)}"


def test_a_cuda_nvimgcodec_engine_builds_on_the_gpu_backends_that_can_be_created():
    from tensor_codec_nodes.common.nvimgcodec_backend import CUDA_DECODE_BACKENDS, CUDA_ENCODE_BACKENDS, GpuBackend

    nv = FakeNv(refused={"gpu"})  # the H100's nvImageCodec 0.9.0.20
    backend = GpuBackend(nv, CUDA_ENCODE_BACKENDS)
    assert backend.build(nv.make) == "codec on hybrid" and nv.tried == ["gpu", "hybrid"]
    assert backend.kinds == ("HYBRID_CPU_GPU",) and backend.describe() == "HYBRID_CPU_GPU backend"
    nv.tried.clear()
    assert backend.build(nv.make) == "codec on hybrid" and nv.tried == ["hybrid"]  # the next thread: that one only
    assert "CPU_ONLY" not in CUDA_ENCODE_BACKENDS + CUDA_DECODE_BACKENDS  # never the CPU for a CUDA engine

    # Decoding: every GPU backend that can be created, together (per image, the first that can).
    nv = FakeNv(refused={"gpu"})
    backend = GpuBackend(nv, CUDA_DECODE_BACKENDS)
    assert backend.build(nv.make) == "codec on hybrid+hw" and nv.tried == ["gpu", "hybrid", "hw", "hybrid+hw"]
    assert backend.describe() == "HYBRID_CPU_GPU + HW_GPU_ONLY backends"
    nv = FakeNv(refused={"gpu"}, together=False)  # together they cannot be: the first alone
    backend = GpuBackend(nv, CUDA_DECODE_BACKENDS)
    assert backend.build(nv.make) == "codec on hybrid" and backend.kinds == ("HYBRID_CPU_GPU",)
    nv = FakeNv(refused={"gpu", "hybrid"})
    assert GpuBackend(nv, CUDA_DECODE_BACKENDS).build(nv.make) == "codec on hw"

    nv = FakeNv(refused={"gpu", "hybrid", "hw"})
    with pytest.raises(RuntimeError) as e:
        GpuBackend(nv, CUDA_DECODE_BACKENDS).build(nv.make)
    assert "no GPU backend" in str(e.value) and "HW_GPU_ONLY: RuntimeError: Internal error" in str(e.value)
    assert "GPU_ONLY: RuntimeError" in str(e.value) and "HYBRID_CPU_GPU: RuntimeError" in str(e.value)

    nv = FakeNv(refused={"gpu"})
    backend = GpuBackend(nv, CUDA_ENCODE_BACKENDS)
    backend.build(nv.make)
    nv.refused.add("hybrid")  # a later thread's codec cannot be made (out of memory, say): said so
    with pytest.raises(RuntimeError, match="could not create another codec on HYBRID_CPU_GPU, where this engine"):
        backend.build(nv.make)


def test_each_thread_gets_its_own_nvimgcodec_codec_on_the_backends_found_once():
    """One codec per thread (one shared by two threads lost batches), the GPU backends found by
    the first and used by the others; on the CPU, the CPU backend."""
    import threading

    from tensor_codec_nodes.common.nvimgcodec_backend import CUDA_DECODE_BACKENDS, CodecPerThread

    nv = FakeNv(refused={"gpu"})
    nv.NVIMGCODEC_DEVICE_CPU_ONLY = -99
    made = []

    def codec(device_id, backends):
        made.append((device_id, tuple(backends)))
        return nv.make(backends)

    per_thread = CodecPerThread(nv, codec, torch.device("cuda", 1), CUDA_DECODE_BACKENDS)
    first = per_thread()
    assert per_thread() is first  # the same thread: the same codec
    other = []
    worker = threading.Thread(target=lambda: other.append(per_thread()))
    worker.start()
    worker.join()
    assert other[0] is not first and other[0] == first == "codec on hybrid+hw"
    assert made[-1] == (1, ("hybrid", "hw")) and per_thread.describe() == "HYBRID_CPU_GPU + HW_GPU_ONLY backends"
    on_cpu = CodecPerThread(nv, codec, torch.device("cpu"), CUDA_DECODE_BACKENDS)
    assert on_cpu() == "codec on cpu" and made[-1] == (-99, ("cpu",)) and on_cpu.describe() == "CPU_ONLY backend"
