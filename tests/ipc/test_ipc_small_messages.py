"""Small CUDA messages (issue 30, item 3): under ``TC_IPC_MIN_BYTES`` a ``transport="auto"`` send
to consumers on this machine goes as host bytes, and its receivers restore the tensors onto the
same GPU, as CUDA IPC would have delivered them. On the CPU stand-in backend (its "GPU" memory is
CPU memory, `fake`), with a dataflow whose consumers all run on this machine."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch

import tensor_codec as tc
from tensor_codec import gpus, routing
from tensor_codec.errors import DecodeError, EncodeError
from tensor_codec.wire.header import KEY_HEADER
from tests.support.fakes import FakeNode
from tests.support.wire import transport_of

THE_GPU = "GPU-00000000-1111-2222-3333-444444444444"  # the stand-in's one GPU
LOCAL = {
    "nodes": [
        {"id": "sender", "path": "x", "inputs": {}, "outputs": ["out"], "deploy": None},
        {"id": "receiver", "path": "y", "inputs": {"x": "sender/out"}, "outputs": [], "deploy": None},
    ],
    "deploy": None,
}


@pytest.fixture
def local_node(fake, monkeypatch):
    monkeypatch.delenv(routing.ENV_TRANSPORT, raising=False)
    monkeypatch.delenv(routing.ENV_IPC_MIN_BYTES, raising=False)
    monkeypatch.delenv("DORA_MACHINE_ID", raising=False)
    return FakeNode(node_id="sender", descriptor=LOCAL)


def as_event(sent) -> dict:
    _output, raw, metadata = sent
    raw = bytes(raw) if raw else b""
    value = pa.Array.from_buffers(pa.uint8(), len(raw), [None, pa.py_buffer(raw)])
    return {"type": "INPUT", "id": "x", "value": value, "metadata": metadata}


def header_of(sent) -> str:
    return sent[2][KEY_HEADER]


def test_under_the_floor_host_bytes_restored_onto_the_same_gpu(local_node, fake, monkeypatch):
    monkeypatch.setenv(routing.ENV_IPC_MIN_BYTES, "8192")
    small = torch.arange(1024, dtype=torch.float32)  # 4 KiB
    name, why = tc.transport_for(local_node, "out", small)
    assert name == "host"
    assert "under TC_IPC_MIN_BYTES=8192 bytes" in why and "restored onto the same GPU" in why
    tc.send(local_node, "out", small)
    sent = local_node.sent[-1]
    assert transport_of(sent[2]) == "host" and f'"gpu":"{THE_GPU}"' in header_of(sent)
    # The receiver restores onto the GPU of that UUID (the stand-in's device for it: the CPU).
    got = tc.receive(as_event(sent))
    assert torch.equal(got, small) and fake.restored_onto == [0]  # the GPU of that UUID
    assert tc.receive(as_event(sent), device="cpu").device.type == "cpu" and fake.restored_onto == [0]
    assert fake.ops["record"] == 0 and fake.ops["wait"] == 0 and fake.setup_ops() == 0  # no CUDA IPC


def test_at_or_over_the_floor_cuda_ipc(local_node, monkeypatch):
    monkeypatch.setenv(routing.ENV_IPC_MIN_BYTES, "8192")
    big = torch.zeros(2048, dtype=torch.float32)  # exactly 8 KiB
    name, why = tc.transport_for(local_node, "out", big)
    assert (name, why) == (
        "cuda-ipc",
        "all 1 consumer(s) on this machine and the data on a GPU, at least TC_IPC_MIN_BYTES=8192 bytes",
    )
    tc.send(local_node, "out", big)
    assert transport_of(local_node.sent[-1][2]) == "cuda-ipc"


def test_the_default_floor_sends_cuda_ipc_at_every_size(local_node):
    assert routing.ipc_min_bytes() == routing.IPC_MIN_BYTES == 0
    assert tc.transport_for(local_node, "out", torch.zeros(1)) == (
        "cuda-ipc",
        "all 1 consumer(s) on this machine and the data on a GPU",
    )


def test_the_floor_counts_every_tensor_of_the_message(local_node, monkeypatch):
    monkeypatch.setenv(routing.ENV_IPC_MIN_BYTES, "4096")
    two_halves = {"a": torch.zeros(512), "b": torch.zeros(512)}  # 2 KiB + 2 KiB
    assert tc.transport_for(local_node, "out", two_halves)[0] == "cuda-ipc"
    assert tc.transport_for(local_node, "out", {"a": torch.zeros(512)})[0] == "host"


def test_the_floor_applies_to_auto_only(local_node, monkeypatch):
    monkeypatch.setenv(routing.ENV_IPC_MIN_BYTES, "1000000")
    small = torch.zeros(16)
    tc.send(local_node, "out", small, transport="cuda-ipc")
    assert transport_of(local_node.sent[-1][2]) == "cuda-ipc"
    monkeypatch.setenv(routing.ENV_TRANSPORT, "cuda-ipc")  # forced: as if the code asked for it
    assert tc.transport_for(local_node, "out", small)[0] == "cuda-ipc"
    monkeypatch.setenv(routing.ENV_TRANSPORT, "host")
    tc.send(local_node, "out", small)
    assert '"gpu"' not in header_of(local_node.sent[-1])  # plain host bytes: restored where asked


def test_a_plan_cached_for_both_host_forms_keeps_them_apart(local_node, monkeypatch):
    """The header with the GPU and the one without are memoized under their own keys."""
    monkeypatch.setenv(routing.ENV_IPC_MIN_BYTES, "1000000")
    t = torch.ones(8)
    for _ in range(2):
        tc.send(local_node, "out", t)
        tc.send(local_node, "out", t, transport="host")
    headers = [header_of(s) for s in local_node.sent]
    assert ['"gpu"' in h for h in headers] == [True, False, True, False]
    assert tc.receive(as_event(local_node.sent[-1])).device == torch.device("cpu")


def test_a_stream_of_small_messages_makes_no_cuda_ipc_operation(local_node, fake, monkeypatch):
    monkeypatch.setenv(routing.ENV_IPC_MIN_BYTES, "65536")
    sizes = [1, 100, 1000, 4096, 16383]
    for i in range(500):
        t = torch.full((sizes[i % len(sizes)],), float(i))
        tc.send(local_node, "out", t)
        got = tc.receive(as_event(local_node.sent[-1]))
        assert torch.equal(got, t)
        local_node.sent.clear()
    assert sum(fake.ops.values()) == 0, dict(fake.ops)


@pytest.mark.parametrize("text", ["64KB", "-1", "1e6", "lots", " 12 3", "\u00b2", "\u0661\u0662"])
def test_a_bad_floor_is_named(local_node, monkeypatch, text):
    monkeypatch.setenv(routing.ENV_IPC_MIN_BYTES, text)
    with pytest.raises(EncodeError, match=r"TC_IPC_MIN_BYTES: expected a whole number of bytes \(>= 0\), got"):
        tc.send(local_node, "out", torch.zeros(4))


def test_a_consumer_elsewhere_still_gets_plain_host_bytes(fake, monkeypatch):
    monkeypatch.setenv(routing.ENV_IPC_MIN_BYTES, "65536")
    monkeypatch.setenv("DORA_MACHINE_ID", "A")
    remote = {
        "nodes": [
            {"id": "sender", "path": "x", "outputs": ["out"], "deploy": {"machine": "A"}},
            {"id": "far", "path": "y", "inputs": {"x": "sender/out"}, "deploy": {"machine": "B"}},
        ],
        "deploy": None,
    }
    node = FakeNode(node_id="sender", descriptor=remote)
    name, why = tc.transport_for(node, "out", torch.zeros(4))
    assert name == "host" and "CUDA IPC cannot cross machines" in why
    tc.send(node, "out", torch.zeros(4))
    assert '"gpu"' not in header_of(node.sent[-1])  # another machine: no GPU of ours to name


# ------------------------------------------------------------------------- the receiver's side


def _host_message_naming(gpu) -> tuple[pa.Array, dict]:
    value, metadata = tc.encode(torch.arange(6, dtype=torch.int16))
    header = metadata[KEY_HEADER]
    assert header.endswith("}")
    metadata = dict(metadata)
    metadata[KEY_HEADER] = header[:-1] + ',"gpu":' + ('"' + gpu + '"' if isinstance(gpu, str) else str(gpu)) + "}"
    return value, metadata


def test_a_gpu_this_process_cannot_see_is_named_and_device_is_the_way_out(fake):
    other = "GPU-99999999-1111-2222-3333-444444444444"
    value, metadata = _host_message_naming(other)

    for _ in range(3):  # names from messages are hostile: what this process cannot see is not kept
        with pytest.raises(DecodeError):
            tc.decode(value, metadata)
    assert other not in gpus.current().index_of_uuid
    with pytest.raises(DecodeError) as e:
        tc.decode(value, metadata)
    assert str(e.value).startswith(
        f"tc.header.gpu: the message's tensors were on {other}, which this process cannot see"
    )
    assert f"it sees {THE_GPU}" in str(e.value) and "pass device=" in str(e.value)
    assert tc.decode(value, metadata, device="cpu").tolist() == list(range(6))


@pytest.mark.parametrize("gpu", ["nvidia", "GPU-", "GPU-" + "a" * 200, "GPU-12345678\\n", 7, "null"])
def test_a_hostile_gpu_field_is_refused_before_any_data_is_read(fake, gpu):
    value, metadata = _host_message_naming(gpu)
    if gpu == "null":
        metadata[KEY_HEADER] = metadata[KEY_HEADER].replace('"null"', "null")
    with pytest.raises(DecodeError, match=r"tc.header.gpu: expected a GPU UUID like 'GPU-3f2a...', got"):
        tc.decode(value, metadata)
