"""Round trips: every dtype x every layout, zero-copy and copied, bit-exact (failure mode 1)."""

from __future__ import annotations

import pytest
import torch

import tensor_codec as tc
from tensor_codec.testing import assert_identical, expected_wire_strides, make_many_small
from tensor_codec.wire.dtypes import supported_torch_dtypes


def make_tensor(dtype: torch.dtype, shape: tuple[int, ...], *, seed: int = 0) -> torch.Tensor:
    """Random bytes viewed as `dtype` (NaNs, denormals and all); bools as 0/1."""
    g = torch.Generator().manual_seed(seed)
    numel = 1
    for s in shape:
        numel *= s
    raw = torch.randint(0, 256, (numel * dtype.itemsize,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


# Each layout is a function of the dtype; names say what failure-mode-1 case they cover.
LAYOUTS = {
    "contiguous": lambda d: make_tensor(d, (4, 5)),
    "stacked": lambda d: torch.stack([make_tensor(d, (2, 3), seed=1), make_tensor(d, (2, 3), seed=2)]),
    "storage_offset_rows": lambda d: make_tensor(d, (10, 6))[3:7],
    "storage_offset_crop": lambda d: make_tensor(d, (10, 6))[2:8, 1:4],
    "transposed": lambda d: make_tensor(d, (4, 6)).t(),
    "permuted": lambda d: make_tensor(d, (2, 3, 4)).permute(1, 2, 0),
    "expanded": lambda d: make_tensor(d, (1, 5)).expand(4, 5),
    "expanded_inner": lambda d: make_tensor(d, (3, 1)).expand(3, 7),
    "channels_last": lambda d: make_tensor(d, (2, 3, 4, 5)).contiguous(memory_format=torch.channels_last),
    "strided_crop": lambda d: make_tensor(d, (9, 12))[1::2, ::3],
    "overlapping_window": lambda d: make_tensor(d, (12,)).as_strided((8, 3), (1, 1)),
    "zero_dim": lambda d: make_tensor(d, ()),
    "zero_size": lambda d: make_tensor(d, (0, 3)),
    "zero_size_permuted": lambda d: make_tensor(d, (3, 0, 2)).permute(2, 0, 1),
    "large_contiguous": lambda d: make_tensor(d, (64, 80)),  # above the small-message copy path
}

DTYPES = supported_torch_dtypes()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("copy", [False, True], ids=["zero_copy", "copy"])
def test_every_dtype_and_layout_round_trips_bit_exact(dtype, layout, copy):
    original = LAYOUTS[layout](dtype)
    snapshot = original.clone()
    value, metadata = tc.encode(original)
    restored = tc.decode(value, metadata, copy=copy)
    assert_identical(restored, original)  # dtype, shape, wire strides, bytes
    assert_identical(original, snapshot, strides="ignore")  # encoding never touches the input


def test_the_stacked_zero_to_eleven_case_arrives_whole():
    stacked = torch.stack([torch.arange(6).reshape(2, 3), torch.arange(6, 12).reshape(2, 3)])
    restored = tc.decode(*tc.encode(stacked))
    assert restored.tolist() == [[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9, 10, 11]]]


@pytest.mark.parametrize(
    "layout", ["transposed", "permuted", "expanded", "expanded_inner", "channels_last", "storage_offset_rows"]
)
def test_dense_layouts_keep_their_exact_strides(layout):
    original = LAYOUTS[layout](torch.float32)
    restored = tc.decode(*tc.encode(original))
    assert restored.stride() == original.stride()
    if layout == "channels_last":
        assert restored.is_contiguous(memory_format=torch.channels_last)


def test_broadcast_dims_travel_once():
    base = torch.arange(5.0)
    expanded = base.expand(1000, 5)
    value, metadata = tc.encode(expanded)
    assert len(value) == 5 * 4  # 20 bytes, not 20,000
    restored = tc.decode(value, metadata)
    assert restored.stride() == (0, 1) and torch.equal(restored, expanded)


@pytest.mark.parametrize("layout", ["strided_crop", "storage_offset_crop", "overlapping_window"])
def test_layouts_with_gaps_or_overlap_are_compacted_row_major(layout):
    original = LAYOUTS[layout](torch.int16)
    restored = tc.decode(*tc.encode(original))
    assert restored.is_contiguous()
    assert expected_wire_strides(original) == restored.stride()
    assert torch.equal(restored, original)


def test_conjugate_and_negative_views_arrive_as_their_values():
    z = torch.randn(3, 4, dtype=torch.complex64)
    for lazy in (z.conj(), z.conj().imag):
        restored = tc.decode(*tc.encode(lazy))
        assert not restored.is_conj() and not restored.is_neg()
        assert torch.equal(restored, lazy.resolve_conj().resolve_neg())


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d.is_floating_point or d.is_complex], ids=str)
def test_requires_grad_survives(dtype):
    original = make_tensor(dtype, (3, 4)).requires_grad_()
    restored = tc.decode(*tc.encode(original))
    assert restored.requires_grad and restored.is_leaf
    assert_identical(restored, original)


def test_many_small_tensors_allocated_back_to_back_each_keep_their_own_bytes():
    tensors = make_many_small(300)
    restored = tc.decode(*tc.encode(tensors))
    assert_identical(restored, tensors)


def test_large_messages_are_zero_copy_views_of_the_arrow_buffer():
    original = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    value, metadata = tc.encode({"a": original, "b": original.t()})
    start = value.buffers()[1].address
    restored = tc.decode(value, metadata)
    for t in restored.values():
        assert start <= t.data_ptr() < start + len(value)
    copied = tc.decode(value, metadata, copy=True)
    for t in copied.values():
        assert not start <= t.data_ptr() < start + len(value)


def test_small_messages_are_copied_into_aligned_memory():
    value, metadata = tc.encode(torch.arange(10))
    restored = tc.decode(value, metadata)
    start = value.buffers()[1].address
    assert not start <= restored.data_ptr() < start + len(value)
    assert restored.data_ptr() % 64 == 0


def test_unaligned_buffers_are_copied_once_and_still_bit_exact():
    import pyarrow as pa

    original = torch.randn(64, 64, dtype=torch.float64)
    value, metadata = tc.encode(original)
    raw = value.buffers()[1].to_pybytes()[: len(value)]
    shifted = pa.py_buffer(b"\0" * 3 + raw)  # the payload starts 3 bytes into this buffer
    unaligned = pa.Array.from_buffers(pa.uint8(), len(raw), [None, shifted], offset=3)
    restored = tc.decode(unaligned, metadata)
    assert restored.data_ptr() % 64 == 0 and torch.equal(restored, original)


def test_sending_then_writing_the_source_does_not_change_the_message():
    source = torch.zeros(64, 64)
    value, metadata = tc.encode(source)
    source.add_(1)
    assert torch.count_nonzero(tc.decode(value, metadata)) == 0


def test_encoding_is_deterministic_and_padding_is_zero():
    obj = {"a": torch.arange(3, dtype=torch.uint8), "b": torch.ones(2, dtype=torch.float64)}
    v1, m1 = tc.encode(obj)
    v2, m2 = tc.encode(obj)
    assert m1 == m2 and v1.equals(v2)
    raw = v1.buffers()[1].to_pybytes()[: len(v1)]
    assert raw[3:64] == b"\0" * 61


@pytest.mark.gpu
def test_cuda_tensors_travel_as_host_bytes():
    original = torch.arange(24.0, device="cuda").reshape(4, 6).t()
    restored = tc.decode(*tc.encode(original))
    assert restored.device.type == "cpu" and restored.stride() == original.stride()
    assert torch.equal(restored, original.cpu())
