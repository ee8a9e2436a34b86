"""CUDA IPC on a real device, in one process (GPU only; `make test-gpu`); between two processes
through real dora dataflows: tests/e2e/test_ipc_gpu_e2e.py."""

from __future__ import annotations

import pytest
import torch

import tensor_codec as tc

pytestmark = pytest.mark.gpu


def test_the_sending_process_cannot_open_its_own_message():
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(2, 2, 3)[:, :, 1:]
    value, metadata = tc.encode(t, transport="cuda-ipc")
    with pytest.raises(tc.DecodeError, match="cannot be opened by the process that sent it"):
        tc.decode(value, metadata)
    assert tc.ipc_flush(15)  # never claimed: reclaimed after the claim timeout
