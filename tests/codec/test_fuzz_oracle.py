"""The decode fuzzer's oracle (tools/fuzz) is written apart from the codec on purpose: what it
believes about the format (dtype sizes, alignments, PackedSequence fields, which layouts a writer
produces, the header's envelope: version, transports and their top-level keys) is tied here to
the codec's own tables and behaviour, so neither drifts from the other silently."""

from __future__ import annotations

import itertools
import json
import re

import pytest
import torch

import tensor_codec as tc
from tensor_codec.errors import DecodeError
from tensor_codec.transports import transport_for_message
from tensor_codec.transports.names import NAMES
from tensor_codec.wire.buffer import CUDA_IPC_ALIGNMENT, HOST_ALIGNMENT
from tensor_codec.wire.dtypes import WIRE_DTYPES
from tensor_codec.wire.leaf import check_leaf_layout
from tensor_codec.wire.structure import PACKED_FIELDS
from tools.fuzz import headers, jsongen, values
from tools.fuzz.seeds import build_seeds


def test_dtype_names_and_item_sizes_are_the_formats():
    assert jsongen.ITEMSIZE == {name: d.itemsize for name, d in WIRE_DTYPES.items()}
    assert jsongen.DTYPE_NAMES == list(WIRE_DTYPES)


def test_alignments_and_packed_sequence_fields_are_the_formats():
    assert headers.ALIGNMENT == {"host": HOST_ALIGNMENT, "cuda-ipc": CUDA_IPC_ALIGNMENT}
    assert headers.PACKED_FIELDS == PACKED_FIELDS


def test_the_envelope_is_the_formats():
    """Version 2, the transports' names and the top-level keys each adds, the writers' order of
    the header's members (tc.encode's own header), and version 1's keys."""
    assert headers.VERSION == tc.WIRE_VERSION
    assert tuple(headers.TRANSPORTS) == NAMES
    for name, keys in headers.TRANSPORTS.items():
        assert frozenset(keys) == transport_for_message(name).header_keys, name
    _, metadata = tc.encode(torch.zeros(2))
    assert list(metadata) == ["tc.header"]
    assert list(json.loads(metadata["tc.header"])) == list(headers.ENVELOPE_KEYS)
    assert headers.V1_KEYS == ("tc.version", "tc.transport")


@pytest.mark.parametrize("transport", list(headers.TRANSPORTS))
def test_the_top_level_keys_a_reader_allows_are_the_oracles(transport):
    """A header with one key too many is refused, naming the keys it may have: the oracle's."""
    seed = next(s for s in build_seeds() if headers.transport_of(json.loads(s.metadata["tc.header"])) == transport)
    header = json.loads(seed.metadata["tc.header"])
    header["x"] = 1
    with pytest.raises(DecodeError, match=r"^tc\.header: expected only keys") as refused:
        tc.decode(values.build(seed.value), {**seed.metadata, "tc.header": json.dumps(header)})
    named = re.search(r"expected only keys (\[[^]]*\])", str(refused.value)).group(1)
    assert named == str(sorted(headers.top_keys(transport)))


def test_a_stray_tc_version_key_is_refused():
    """The oracle's rule (tools/fuzz/execute.py): no message with tc.version decodes."""
    value, metadata = tc.encode(torch.zeros(2))
    for version in (1, headers.VERSION, None):
        with pytest.raises(DecodeError, match=r"^tc\.version: expected no such key"):
            tc.decode(value, {**metadata, "tc.version": version})


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
