"""The CPU stand-in for the CUDA IPC device operations, installed for one test (`fake`)."""

from __future__ import annotations

import pytest

from tensor_codec import plan
from tensor_codec.cuda_ipc import fields as ipc_fields
from tensor_codec.cuda_ipc import transport as cuda_ipc
from tests.support.ipc_fake_backend import FakeBackend


@pytest.fixture
def fake(monkeypatch, tmp_path):
    backend = FakeBackend(directory=str(tmp_path))
    cuda_ipc.use_backend(backend)
    real_check = ipc_fields.check_same_machine
    # One process plays producer and receiver: lift only the same-process refusal.
    monkeypatch.setattr(cuda_ipc, "check_same_machine", lambda producer: real_check(producer, pid=-1))
    # Its "GPU" memory is CPU memory: a message holds GPU data when it holds what it can share
    # (without this the codec sends such messages as host bytes, as it does any CPU message).
    monkeypatch.setattr(plan, "on_gpu", lambda t: backend.device_index_of(t) is not None)
    yield backend
    state = cuda_ipc._state
    cuda_ipc.use_backend(None)
    if state is not None and state.producer.has_ledger:
        state.producer.ledger.close()
    backend.close()
