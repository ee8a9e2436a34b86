"""tc.send_plain / tc.plain_bytes (flat bytes for dora's image nodes) and decoding onto a device."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

import tensor_codec as tc
import tensor_codec.testing
from tensor_codec.testing import assert_identical, make_suite
from tests.support.fakes import FakeNode


@pytest.mark.parametrize(
    "tensor",
    [
        torch.arange(24, dtype=torch.uint8).reshape(2, 3, 4).permute(1, 2, 0),  # CHW -> HWC view
        torch.arange(100, dtype=torch.int32).reshape(10, 10)[2:7:2, 1:],
        torch.arange(6.0).expand(3, 6),
        torch.tensor(3.5),
        torch.zeros(0, 3),
        torch.randn(3, 4, dtype=torch.complex64).conj(),
    ],
    ids=["hwc_view", "strided_crop", "expanded", "scalar", "empty", "conj"],
)
def test_send_plain_writes_row_major_values_in_one_message(tensor):
    node = FakeNode()
    tc.send_plain(node, "image", tensor, {"encoding": "rgb8", "width": 3})
    ((output_id, raw, metadata),) = node.sent
    expected = tensor.resolve_conj().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    assert output_id == "image" and raw == expected
    assert metadata == {"encoding": "rgb8", "width": 3}  # no codec keys


def test_send_plain_refuses_what_has_no_plain_bytes():
    with pytest.raises(tc.EncodeError, match="tensor: expected a torch.Tensor, got list"):
        tc.send_plain(FakeNode(), "o", [1, 2])
    with pytest.raises(tc.EncodeError, match="expected a dense strided tensor"):
        tc.send_plain(FakeNode(), "o", torch.eye(3).to_sparse())


def test_send_plain_checks_the_route_like_send():
    with pytest.raises(tc.MessageTooLargeError, match="shared_memory_pool_size"):
        tc.send_plain(FakeNode(pool=1 << 20), "o", torch.empty(70 << 20, dtype=torch.uint8))


def test_plain_bytes_views_aligned_buffers_and_copies_unaligned_ones():
    buffer = pa.allocate_buffer(8192)  # Arrow allocates 64-byte aligned memory
    np.frombuffer(buffer, dtype=np.uint8)[:] = np.arange(8192) % 251
    aligned = pa.Array.from_buffers(pa.uint8(), 8192, [None, buffer])
    view = tc.plain_bytes(aligned)
    assert view.dtype == torch.uint8 and view.data_ptr() == aligned.buffers()[1].address
    unaligned = aligned.slice(3)
    copied = tc.plain_bytes(unaligned)
    assert torch.equal(copied, view[3:]) and copied.data_ptr() != view.data_ptr() + 3
    assert tc.plain_bytes(pa.array([], type=pa.uint8())).numel() == 0


def test_plain_bytes_refuses_other_arrays():
    with pytest.raises(tc.DecodeError, match="value: expected a flat pyarrow UInt8 array, got int64"):
        tc.plain_bytes(pa.array([1, 2]))
    with pytest.raises(tc.DecodeError, match="value: expected no nulls, got 1"):
        tc.plain_bytes(pa.array([1, None], type=pa.uint8()))


def test_decode_device_cpu_is_the_normal_decode():
    obj = make_suite()["nested/detection"]
    assert_identical(tc.decode(*tc.encode(obj), device="cpu"), obj)


@pytest.mark.parametrize("device", ["tpu", "meta", 3.5])
def test_decode_refuses_unknown_devices(device):
    value, metadata = tc.encode(torch.ones(2))
    with pytest.raises(ValueError, match="device: expected None, 'cpu', 'cuda' or 'cuda:N'"):
        tc.decode(value, metadata, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_decode_onto_cuda_without_cuda_is_a_clear_error():
    value, metadata = tc.encode(torch.ones(2))
    with pytest.raises(ValueError, match="device: 'cuda' asked for, but CUDA is not available"):
        tc.decode(value, metadata, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(make_suite()))
def test_decode_onto_cuda_keeps_everything_but_the_device(name):
    obj = make_suite()[name]
    restored = tc.decode(*tc.encode(obj), device="cuda")
    devices = []
    on_cpu = tc.map_tensors(lambda plain, original: devices.append(plain.device.type) or plain.cpu(), restored)
    if isinstance(obj, torch.nn.utils.rnn.PackedSequence):
        assert restored.data.is_cuda and restored.batch_sizes.device.type == "cpu"  # as torch keeps it
    else:
        assert set(devices) <= {"cuda"}
    assert_identical(on_cpu, obj, strides="ignore")
    for got, want in zip(_leaves(restored), _leaves(obj)):  # exact wire strides on the GPU too
        assert got.stride() == tc.testing.expected_wire_strides(want) or got.numel() <= 1


def _leaves(obj):
    found = []
    tc.map_tensors(lambda plain, original: found.append(plain) or plain, obj)
    return found


def test_send_plain_refuses_a_view_of_a_freed_storage():
    base = torch.arange(16.0)
    view = base[4:]
    base.untyped_storage().resize_(0)
    with pytest.raises(tc.EncodeError, match="its storage holds 0 bytes"):
        tc.send_plain(FakeNode(), "o", view)
