"""Which nvImageCodec backend the JPEG nodes' CUDA engines build their Encoder and Decoder on.

nvImageCodec registers each codec under a backend kind, and which kinds exist depends on its
version, its nvJPEG and the GPU. On an H100 (2026-11-27: nvImageCodec 0.9.0.20, nvidia-nvjpeg
13.3.2.43, driver 580.159.04, CUDA 13.0; issue 37):
  - Encoder: GPU_ONLY could not be created ("Could not create encoder. Code: 7"), HYBRID_CPU_GPU
    could, and encoded 32 4K frames in one call at 1,212 fps (on the GPU: its CPU backend does
    ~230 fps on 16 cores);
  - Decoder: GPU_ONLY could not be created either; HYBRID_CPU_GPU decoded 32 4K JPEGs at 1,506-1,517
    fps, HW_GPU_ONLY (the NVJPG engines) at 1,250-1,271; a Decoder built with no backend named
    decoded on the CPU backend (~200 fps), so the node's "CUDA" decode ran at CPU speed.
So a CUDA engine names its backends: those of CUDA_ENCODE_BACKENDS / CUDA_DECODE_BACKENDS (in that
order of preference, measured) that can be created here, together (nvImageCodec then takes, per
image, the first that can do it: a JPEG the hardware decoder refuses still decodes on the GPU),
or the first alone where together they cannot be; never a CPU one. None can: the engine does not
start, saying why for each, and ENGINE=auto takes the next library (jpeg_engines.start_engine).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["CUDA_ENCODE_BACKENDS", "CUDA_DECODE_BACKENDS", "GpuBackend", "CodecPerThread"]

CUDA_ENCODE_BACKENDS = ("GPU_ONLY", "HYBRID_CPU_GPU")
CUDA_DECODE_BACKENDS = ("GPU_ONLY", "HYBRID_CPU_GPU", "HW_GPU_ONLY")


class GpuBackend:
    """Builds nvImageCodec Encoders or Decoders (one per thread, by the engine) on the backends of
    `kinds` this machine can create (see the module): the first build finds them, the later ones
    (other threads) use what it found, so every worker runs on the same backends."""

    def __init__(self, nv: Any, kinds: Sequence[str]):
        self._nv = nv
        self._kinds = tuple(kinds)
        self._lock = threading.Lock()
        self.kinds: tuple[str, ...] | None = None  # the backend kinds in use, once found

    def build(self, make: Callable[[list], Any]) -> Any:
        """`make(backends)` -> an Encoder or Decoder, on the backends found (see the class)."""
        with self._lock:
            if self.kinds is None:
                made, self.kinds = self._find(make)
                return made
            kinds = self.kinds
        try:
            return make(self._backends(kinds))
        except Exception as e:
            raise RuntimeError(
                f"nvImageCodec could not create another codec on {' + '.join(kinds)}, where this engine's first "
                f"one was made: {type(e).__name__}: {e}"
            ) from e

    def _backends(self, kinds: Sequence[str]) -> list:
        return [self._nv.Backend(getattr(self._nv.BackendKind, kind)) for kind in kinds]

    def _find(self, make: Callable[[list], Any]) -> tuple[Any, tuple[str, ...]]:
        creatable: list[str] = []
        first = None
        tried = []
        for kind in self._kinds:
            if getattr(self._nv.BackendKind, kind, None) is None:
                tried.append(f"{kind}: not in this nvImageCodec")
                continue
            try:
                made = make(self._backends([kind]))
            except Exception as e:  # nvImageCodec says RuntimeError; any refusal means: not this one
                tried.append(f"{kind}: {type(e).__name__}: {e}")
                continue
            creatable.append(kind)
            first = made if first is None else first
        if not creatable:
            raise RuntimeError("nvImageCodec has no GPU backend it can create here (" + "; ".join(tried) + ")")
        if len(creatable) > 1:
            try:
                return make(self._backends(creatable)), tuple(creatable)
            except Exception:  # together they cannot be: the first alone
                pass
        return first, (creatable[0],)

    def describe(self) -> str:
        if not self.kinds:
            return "no backend yet"
        return f"{' + '.join(self.kinds)} backend{'s' if len(self.kinds) > 1 else ''}"


class CodecPerThread:
    """Each thread's own nvImageCodec `codec` (nv.Encoder or nv.Decoder: one shared by two threads
    lost batches and corrupted the heap), made on its first call: on CUDA on the GPU backends of
    `gpu_kinds` that GpuBackend finds, on the CPU on nvImageCodec's CPU backend."""

    def __init__(self, nv: Any, codec: Callable[..., Any], device: Any, gpu_kinds: Sequence[str]):
        self._nv = nv
        self._codec = codec
        self._index = device.index or 0
        self._gpu = GpuBackend(nv, gpu_kinds) if device.type == "cuda" else None
        self._local = threading.local()

    def __call__(self) -> Any:
        made = getattr(self._local, "codec", None)
        if made is None:
            nv, codec, index = self._nv, self._codec, self._index
            if self._gpu is not None:
                made = self._gpu.build(lambda backends: codec(device_id=index, backends=backends))
            else:
                made = codec(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, backends=[nv.Backend(nv.BackendKind.CPU_ONLY)])
            self._local.codec = made
        return made

    def describe(self) -> str:
        return self._gpu.describe() if self._gpu is not None else "CPU_ONLY backend"
