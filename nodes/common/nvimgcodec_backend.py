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
So a CUDA engine names its backend: the first of CUDA_ENCODE_BACKENDS / CUDA_DECODE_BACKENDS (in
that order of preference, measured) that can be created, never a CPU one. None can: the engine
does not start, saying why for each, and ENGINE=auto takes the next library (jpeg_engines).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["CUDA_ENCODE_BACKENDS", "CUDA_DECODE_BACKENDS", "GpuBackend"]

CUDA_ENCODE_BACKENDS = ("GPU_ONLY", "HYBRID_CPU_GPU")
CUDA_DECODE_BACKENDS = ("GPU_ONLY", "HYBRID_CPU_GPU", "HW_GPU_ONLY")


class GpuBackend:
    """Builds nvImageCodec Encoders or Decoders (one per thread, by the engine) on the first backend
    kind of `kinds` this machine can create one on; the kind found first is the only one later
    threads use, so every worker runs on the same backend."""

    def __init__(self, nv: Any, kinds: Sequence[str]):
        self._nv = nv
        self._kinds = tuple(kinds)
        self._lock = threading.Lock()
        self.kind: str | None = None  # the backend kind in use, once one was created

    def build(self, make: Callable[[list], Any]) -> Any:
        """`make(backends)` -> an Encoder or Decoder, on the backend kind found (see the class)."""
        with self._lock:
            kinds = (self.kind,) if self.kind is not None else self._kinds
        tried = []
        for kind in kinds:
            backend_kind = getattr(self._nv.BackendKind, kind, None)
            if backend_kind is None:
                tried.append(f"{kind}: not in this nvImageCodec")
                continue
            try:
                made = make([self._nv.Backend(backend_kind)])
            except Exception as e:  # nvImageCodec says RuntimeError; any refusal means: try the next
                tried.append(f"{kind}: {type(e).__name__}: {e}")
                continue
            with self._lock:
                self.kind = kind
            return made
        raise RuntimeError("nvImageCodec has no GPU backend it can create here (" + "; ".join(tried) + ")")

    def describe(self) -> str:
        return f"{self.kind} backend" if self.kind else "no backend yet"
