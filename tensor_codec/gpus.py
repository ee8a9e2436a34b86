"""This process's GPUs: which physical GPU (by UUID) is behind a CUDA device index, and back. A
header names a GPU by UUID (a CUDA IPC producer's, or the one host bytes are restored onto), so the
same GPU under another index (CUDA_VISIBLE_DEVICES) is found. Nothing here initialises CUDA before
a GPU is asked about.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .errors import DecodeError, EncodeError, format_path

if TYPE_CHECKING:
    from .plan import Plan

__all__ = ["Gpus", "TorchGpus", "current", "use", "gpu_of", "device_of_gpu"]


class TorchGpus:
    """The GPUs torch sees. A stand-in has the same five methods (tests/support/ipc_fake_backend.py)."""

    def gpu_uuid(self, index: int) -> str:
        """The physical GPU behind a CUDA device index of this process, e.g. 'GPU-3f2a...'."""
        text = str(torch.cuda.get_device_properties(index).uuid)
        return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"

    def visible_gpus(self) -> list[str]:
        return [self.gpu_uuid(i) for i in range(torch.cuda.device_count())]

    def local_index(self, uuid: str) -> int | None:
        """This process's CUDA index for a GPU UUID, or None if it cannot see that GPU."""
        seen = self.visible_gpus()
        return seen.index(uuid) if uuid in seen else None

    def torch_device(self, index: int) -> torch.device:
        """The device tensors of GPU `index` are restored onto (host bytes bound for a GPU)."""
        return torch.device("cuda", index)

    def device_index_of(self, t: torch.Tensor) -> int | None:
        """The GPU a tensor lives on, None for a CPU tensor."""
        return t.device.index if t.device.type == "cuda" else None


class Gpus:
    """The GPUs of this process by UUID and by index, learned from `source` once each."""

    def __init__(self, source: Any):
        self.source = source
        self.uuid_of_index: dict[int, str] = {}
        self.index_of_uuid: dict[str, int] = {}  # only GPUs this process sees

    def uuid(self, index: int) -> str:
        uuid = self.uuid_of_index.get(index)
        if uuid is None:
            uuid = self.uuid_of_index[index] = self.source.gpu_uuid(index)
        return uuid

    def index_of(self, uuid: str, where: str, instead: str) -> int:
        """This process's index of the GPU `uuid`, which a received header names at `where`;
        DecodeError naming the GPUs it sees and what to do `instead` if it cannot see it (not
        remembered: names from messages are hostile)."""
        index = self.index_of_uuid.get(uuid)
        if index is None:
            index = self.source.local_index(uuid)
            if index is None:
                seen = ", ".join(self.source.visible_gpus()) or "no GPU"
                raise DecodeError(
                    f"{where}: the message's tensors were on {uuid}, which this process cannot see "
                    f"(it sees {seen}); {instead}"
                )
            self.index_of_uuid[uuid] = index
        return index

    def device_of(self, plan: Plan) -> int:
        """The index of the one GPU a message's tensors are on; EncodeError for tensors on two
        GPUs, or on none (the CPU leaves of a message are copied up: they do not count)."""
        index = None
        device_index_of = self.source.device_index_of
        for leaf, path in zip(plan.leaves, plan.paths):
            here = device_index_of(leaf.source)
            if here is None:
                continue
            if index is None:
                index, first = here, path
            elif here != index:
                raise EncodeError(
                    f"mixed GPUs at `{format_path(path)}`: transport='cuda-ipc' sends one GPU per message, "
                    f"got cuda:{here} here and cuda:{index} at `{format_path(first)}`"
                )
        if index is None:
            raise EncodeError(
                "unsupported transport at `$`: transport='cuda-ipc' moves CUDA tensors, got no CUDA tensor "
                "in the message (use transport='host' for CPU tensors)"
            )
        return index


# Process-wide by nature: a GPU's identity is the whole process's (tests install a stand-in's).
_current: Gpus | None = None


def current() -> Gpus:
    """This process's GPUs (torch's unless a stand-in was installed with `use`)."""
    global _current
    gpus = _current
    if gpus is None:
        gpus = _current = Gpus(TorchGpus())
    return gpus


def use(source: Any) -> None:
    """Learn GPUs from `source` from now on (the CPU stand-in of the tests); None: torch's."""
    global _current
    _current = None if source is None else Gpus(source)


def gpu_of(plan: Plan) -> str:
    """The UUID of the one GPU a message's tensors are on (`Gpus.device_of`'s errors): routing's HOST_TO_GPU."""
    gpus = current()
    return gpus.uuid(gpus.device_of(plan))


def device_of_gpu(uuid: str, where: str) -> torch.device:
    """This process's device for the GPU a received header names at `where` (`Gpus.index_of`'s error)."""
    gpus = current()
    return gpus.source.torch_device(gpus.index_of(uuid, where, "pass device=... to restore them elsewhere"))
