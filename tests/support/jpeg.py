"""What the JPEG tests share: the engines as pytest parameters (skipped, with the reason, where an
engine cannot run), engines made by name, and reference encode/decode through TorchCodec (a test
that uses them skips, with the reason, where TorchCodec does not import).

torchvision's codecs warn (DeprecationWarning) on every call since 0.29; the project's pytest
configuration makes that warning an error, so only the parameters that run the torchvision
engine on purpose let it through, and the engines made here where ENGINE=auto takes torchvision
(without TorchCodec)."""

from __future__ import annotations

import threading
import warnings
import zlib

import pytest
import torch

from tensor_codec_nodes.common.jpeg_engines import ENGINES, EngineChoice, choose_decoder, choose_encoder, unavailable
from tensor_codec_nodes.common.quality import compare
from tensor_codec_nodes.jpeg_decoder.engines import make_decode_engine
from tensor_codec_nodes.jpeg_encoder.engines import make_engine
from tests.support.optional import import_or_skip

MIN_PSNR, MAX_MAD = 35.0, 3.0  # the bounds every engine is held to at quality 90 on the test pattern
DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"
TORCHVISION_DEPRECATED = pytest.mark.filterwarnings(f"ignore:{DEPRECATION}:DeprecationWarning")


def engine_params(device_type: str = "cpu", names=ENGINES) -> list:
    """One pytest.param per engine, skipped with the reason when it cannot run on `device_type`."""
    params = []
    for name in names:
        marks = [TORCHVISION_DEPRECATED] if name == "torchvision" else []
        reason = unavailable(name, device_type)
        if reason:
            marks.append(pytest.mark.skip(reason=f"{name} on {device_type}: {reason}"))
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def _deliberate(choice: EngineChoice) -> EngineChoice:
    """`choice`; where it is torchvision (ENGINE=auto's fallback where TorchCodec does not import)
    its use is deliberate, so its deprecation warning is let through for the rest of the test, as
    TORCHVISION_DEPRECATED does (pytest puts the warning filters back after each test)."""
    if choice.name == "torchvision":
        warnings.filterwarnings("ignore", message=DEPRECATION, category=DeprecationWarning)
    return choice


def encoder_engine(name: str, device, quality: int = 90, workers: int = 2, subsampling: str = "auto"):
    device = torch.device(device)
    return make_engine(_deliberate(choose_encoder(name, subsampling, device)), device, quality, workers)


def decoder_engine(name: str, device):
    device = torch.device(device)
    return make_decode_engine(_deliberate(choose_decoder(name, device)), device)


def reference_encode(frame: torch.Tensor, quality: int = 90) -> torch.Tensor:
    """A JPEG of a CPU (C, H, W) uint8 frame, by TorchCodec on the CPU."""
    return import_or_skip("torchcodec.encoders").JpegEncoder(frame.cpu()).to_tensor(quality=quality)


def reference_decode(jpeg: torch.Tensor, channels: int | None = 3) -> torch.Tensor:
    """A JPEG (flat uint8 CPU tensor) decoded on the CPU by TorchCodec to `channels` channels
    (None: as many as the JPEG has)."""
    mode = {None: "UNCHANGED", 1: "GRAY", 3: "RGB"}[channels]
    return import_or_skip("torchcodec.decoders").decode_jpeg(jpeg, mode=mode)


def assert_close_to_source(jpeg: torch.Tensor, source: torch.Tensor, what: str) -> tuple[float, float]:
    """The JPEG decodes (on the CPU) to `source` within the bounds; -> (dB, mean abs diff)."""
    decoded = reference_decode(jpeg, source.shape[0])
    db, mad = compare(decoded, source.cpu())
    assert db >= MIN_PSNR and mad <= MAX_MAD, f"{what}: {db:.2f} dB, mean abs diff {mad:.2f}"
    return db, mad


class Verifier:
    """Checks every JPEG of a long run against its source, fully only once per distinct JPEG: the
    engines are deterministic, so a JPEG whose bytes (crc32) equal one already decoded and found
    within bounds for the same source frame has the same verdict; any other JPEG, a corrupt one
    included, is decoded and compared in full. A 4K check costs ~60 ms on 2 cores, an encode ~20."""

    def __init__(self):
        # It decodes with TorchCodec, often on a test's worker threads, where a skip would be an
        # unhandled thread exception, not a skip: so the test skips here, where it is made.
        import_or_skip("torchcodec.decoders")
        self.verified: set[tuple[object, int, int]] = set()
        self.full_checks = 0
        self.lock = threading.Lock()

    def check(self, jpeg: torch.Tensor, key, source: torch.Tensor, what: str) -> None:
        seen = (key, jpeg.numel(), zlib.crc32(jpeg.numpy()))
        with self.lock:
            if seen in self.verified:
                return
        assert_close_to_source(jpeg, source, what)
        with self.lock:
            self.verified.add(seen)
            self.full_checks += 1


__all__ = [
    "Verifier",
    "ENGINES",
    "EngineChoice",
    "MIN_PSNR",
    "MAX_MAD",
    "TORCHVISION_DEPRECATED",
    "engine_params",
    "encoder_engine",
    "decoder_engine",
    "reference_encode",
    "reference_decode",
    "assert_close_to_source",
]
