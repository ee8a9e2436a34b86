"""DEVICE=auto|cpu|cuda[:N] -> a torch.device, checked against what this machine has; and each
worker thread's own CUDA stream."""

from __future__ import annotations

import threading

import torch

from .settings import SettingError, parse_device_spec


def resolve_device(spec: str, *, setting: str = "DEVICE") -> torch.device:
    """auto = the current CUDA device when there is one, else the CPU. Asking for CUDA on a
    machine without it (or for a device index it lacks) is a setting error, not a fallback."""
    try:
        text = parse_device_spec(spec)
    except SettingError as e:
        raise SettingError(f"{setting}: {e}") from None
    if text == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if text == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if available else torch.device("cpu")
    if not available:
        raise SettingError(f"{setting}: expected auto or cpu on this machine (no CUDA device), got {spec!r}")
    index = int(text.split(":")[1]) if ":" in text else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise SettingError(f"{setting}: expected cuda:0..cuda:{count - 1} (this machine has {count}), got {spec!r}")
    return torch.device("cuda", index)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (to time when a tensor is really usable)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


class StreamPerThread:
    """Each thread's own CUDA stream on `device`, made on the thread's first call: the JPEG nodes'
    workers order their work on it alone, fenced against other streams by events."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self._local = threading.local()

    def __call__(self) -> torch.cuda.Stream:
        stream = getattr(self._local, "stream", None)
        if stream is None:
            stream = self._local.stream = torch.cuda.Stream(self.device)
        return stream
