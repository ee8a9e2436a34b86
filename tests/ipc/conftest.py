"""The CPU stand-in for the CUDA IPC device operations, installed for one test (`fake`)."""

from __future__ import annotations

import pytest

from tests.support.ipc_fake_backend import installed


@pytest.fixture
def fake(monkeypatch, tmp_path):
    yield from installed(monkeypatch, tmp_path)
