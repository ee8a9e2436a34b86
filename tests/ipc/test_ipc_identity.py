"""Host and GPU identity for CUDA IPC."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tensor_codec.cuda_ipc.identity import host_identity, host_name, pid_namespace
from tensor_codec.gpus import TorchGpus


@pytest.mark.slow  # fresh interpreters
def test_host_identity_is_stable_and_shared_by_processes_of_this_kernel():
    here = host_identity()
    code = (
        "from tensor_codec.cuda_ipc.identity import host_identity, pid_namespace; print(host_identity()); "
        "print(pid_namespace())"
    )
    other, namespace = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert here == other and host_name(here) and "@" in here
    assert pid_namespace() == namespace


@pytest.mark.gpu
def test_gpu_uuids_map_back_to_their_index():
    gpus = TorchGpus()
    for index in range(torch.cuda.device_count()):
        uuid = gpus.gpu_uuid(index)
        assert uuid.startswith(("GPU-", "MIG-")) and gpus.local_index(uuid) == index
    assert gpus.local_index("GPU-00000000-0000-0000-0000-000000000000") is None


@pytest.mark.gpu
def test_the_same_gpu_under_another_index_has_the_same_uuid():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs to renumber them")
    uuid_of_1 = TorchGpus().gpu_uuid(1)
    seen = subprocess.run(
        [sys.executable, "-c", "from tensor_codec.gpus import TorchGpus; print(TorchGpus().gpu_uuid(0))"],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": "1"},
    ).stdout.strip()
    assert seen == uuid_of_1
