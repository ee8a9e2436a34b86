"""Copies through the two pinned chunk buffers (tensor_codec/cuda_ipc/staging.py) with a CPU stand-in for
CUDA: the right bytes at every chunk boundary, and no buffer refilled before the copy that last
used it was waited for. The real thing (pinned memory, streams) runs in the gpu tests."""

from __future__ import annotations

import pytest
import torch

from tensor_codec.cuda_ipc import staging

CHUNK = 64


class Ops:
    """Pinned memory is plain memory; an event logs when it is recorded and waited for."""

    def __init__(self):
        self.log = []
        self.buffers = []

    def alloc_pinned(self, nbytes):
        buffer = torch.empty(nbytes, dtype=torch.uint8)
        self.buffers.append(buffer)
        return buffer

    def new_event(self):
        ops, index = self, len(self.log)

        class Event:
            name = f"e{sum(1 for entry in ops.log if entry[0] == 'new')}"

            def record(self, stream):
                ops.log.append(("record", self.name))

            def synchronize(self):
                ops.log.append(("wait", self.name))

        ops.log.append(("new", index))
        return Event()

    def current_stream(self, device):
        return None


@pytest.fixture
def ops(monkeypatch):
    fake = Ops()
    staging.use_ops(fake, chunk=CHUNK)
    monkeypatch.setenv(staging.ENV_MIN_BYTES, "1")
    yield fake
    staging.use_ops(None)


def records_and_waits(log):
    return [entry for entry in log if entry[0] in ("record", "wait")]


def check_each_record_waited_before_the_next(log):
    """An event is recorded again (its buffer reused) only after it was waited for."""
    pending = set()
    for kind, name in records_and_waits(log):
        if kind == "record":
            assert name not in pending, f"buffer of {name} refilled before its copy was waited for: {log}"
            pending.add(name)
        else:
            pending.discard(name)
    return pending


@pytest.mark.parametrize("n", [1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK + 7, 10 * CHUNK])
def test_device_to_host_bytes_at_every_boundary(ops, n):
    src = torch.randint(0, 256, (n,), dtype=torch.uint8)
    dst = torch.zeros(n + 8, dtype=torch.uint8)
    staging.device_to_host(src, dst[4 : 4 + n])
    assert torch.equal(dst[4 : 4 + n], src)
    assert not dst[:4].any() and not dst[4 + n :].any()
    assert check_each_record_waited_before_the_next(ops.log) == set()  # all landed on return


@pytest.mark.parametrize("n", [1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK + 7, 10 * CHUNK])
def test_host_to_device_bytes_at_every_boundary(ops, n):
    src = torch.randint(0, 256, (n,), dtype=torch.uint8)
    dst = torch.zeros(n, dtype=torch.uint8)
    staging.host_to_device(src, dst)
    assert torch.equal(dst, src)
    # Like a blocking copy: nothing of it is in flight when it returns.
    assert check_each_record_waited_before_the_next(ops.log) == set()


def test_two_buffers_serve_every_copy_in_turn(ops):
    src = torch.arange(5 * CHUNK, dtype=torch.int64).to(torch.uint8)
    for _ in range(3):  # buffers are reused across copies, both ways
        dst = torch.empty_like(src)
        staging.device_to_host(src, dst)
        assert torch.equal(dst, src)
        back = torch.empty_like(src)
        staging.host_to_device(dst, back)
        assert torch.equal(back, src)
    assert len(ops.buffers) == 2 and all(b.numel() == CHUNK for b in ops.buffers)
    check_each_record_waited_before_the_next(ops.log)


def test_small_copies_go_direct(ops, monkeypatch):
    monkeypatch.setenv(staging.ENV_MIN_BYTES, str(10 * CHUNK))
    src = torch.randint(0, 256, (3 * CHUNK,), dtype=torch.uint8)
    dst = torch.empty_like(src)
    staging.device_to_host(src, dst)
    assert torch.equal(dst, src)
    assert ops.buffers == []  # no pinned memory was even allocated
    monkeypatch.setenv(staging.ENV_MIN_BYTES, "off")
    staging.host_to_device(src, dst)
    assert ops.buffers == []


@pytest.mark.parametrize(
    "text, expected", [("", staging.DEFAULT_MIN_BYTES), ("0", 0), ("4096", 4096), ("off", None), ("Never", None)]
)
def test_threshold_setting(monkeypatch, text, expected):
    monkeypatch.setenv(staging.ENV_MIN_BYTES, text)
    assert staging.staging_threshold() == expected


def test_a_bad_threshold_is_named(monkeypatch):
    monkeypatch.setenv(staging.ENV_MIN_BYTES, "1MB")
    with pytest.raises(ValueError, match="TC_STAGING_MIN_BYTES: expected a number of bytes or 'off', got '1mb'"):
        staging.staging_threshold()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, (4 << 20) - 1, (4 << 20) + 1, 9 << 20])
def test_real_pinned_staging_both_ways(monkeypatch, n):
    monkeypatch.setenv(staging.ENV_MIN_BYTES, "1")
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
    host = torch.empty(n, dtype=torch.uint8)
    staging.device_to_host(src, host)
    assert torch.equal(host, src.cpu())
    back = torch.empty(n, dtype=torch.uint8, device="cuda")
    staging.host_to_device(host, back)
    assert torch.equal(back, src)


@pytest.mark.gpu
def test_a_copy_off_the_gpu_waits_for_work_queued_on_the_current_stream(monkeypatch):
    monkeypatch.setenv(staging.ENV_MIN_BYTES, "1")
    n = 16 << 20
    src = torch.zeros(n, dtype=torch.uint8, device="cuda")
    torch.cuda._sleep(50_000_000)  # keep the stream busy, then write the bytes the copy must see
    src.fill_(7)
    host = torch.empty(n, dtype=torch.uint8)
    staging.device_to_host(src, host)
    assert bool((host == 7).all())
