"""The decode fuzzer's oracle (tools/fuzz) is written apart from the codec on purpose: what it
believes about the format (dtype sizes, alignments, PackedSequence fields, which layouts a writer
produces) is tied here to the codec's own tables, so neither drifts from the other silently."""

from __future__ import annotations

import itertools

import pytest

from tensor_codec.errors import DecodeError
from tensor_codec.wire.buffer import CUDA_IPC_ALIGNMENT, HOST_ALIGNMENT
from tensor_codec.wire.dtypes import WIRE_DTYPES
from tensor_codec.wire.leaf import check_leaf_layout
from tensor_codec.wire.structure import PACKED_FIELDS
from tools.fuzz import headers, jsongen


def test_dtype_names_and_item_sizes_are_the_formats():
    assert jsongen.ITEMSIZE == {name: d.itemsize for name, d in WIRE_DTYPES.items()}
    assert jsongen.DTYPE_NAMES == list(WIRE_DTYPES)


def test_alignments_and_packed_sequence_fields_are_the_formats():
    assert headers.ALIGNMENT == {"host": HOST_ALIGNMENT, "cuda-ipc": CUDA_IPC_ALIGNMENT}
    assert headers.PACKED_FIELDS == PACKED_FIELDS


SIZES = (0, 1, 2, 3)
STRIDES = (0, 1, 2, 3, 6)


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_the_layouts_a_writer_produces_are_the_ones_a_reader_accepts(rank):
    """Every shape and stride combination of small sizes: the fuzzer's `required_nbytes` names
    exactly the byte count the reader accepts, and None exactly where it refuses every count."""
    dtype = WIRE_DTYPES["int16"]
    for shape in itertools.product(SIZES, repeat=rank):
        for strides in itertools.product(STRIDES, repeat=rank):
            expected = headers.required_nbytes(dtype.itemsize, list(shape), list(strides))
            accepted = [n for n in range(0, 2 * 3**rank + 2, 2) if _accepts(dtype, shape, strides, n)]
            assert accepted == ([] if expected is None else [expected]), (shape, strides)


def _accepts(dtype, shape, strides, nbytes) -> bool:
    try:
        check_leaf_layout(dtype, shape, strides, nbytes, "leaf")
    except DecodeError:
        return False
    return True
