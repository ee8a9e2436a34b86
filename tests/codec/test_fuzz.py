"""Property-based: mutated metadata, mutated headers and truncated or foreign buffers never raise
anything but CodecError (and never crash the process)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import torch

pytest.importorskip("hypothesis")  # a test extra: an offline GPU host may not have it

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tensor_codec as tc  # noqa: E402
from tensor_codec.testing import make_detection_sample, make_packed_sequences, make_tvtensor_cases  # noqa: E402

SEEDS = {
    "tensor": torch.arange(2048, dtype=torch.float32).reshape(32, 64).t(),
    "small": torch.tensor([1, 2, 3], dtype=torch.int16),
    "bools": torch.tensor([[True, False], [False, True]]),
    "detection": make_detection_sample(),
    "packed": make_packed_sequences()["packed_unsorted"],
    "boxes": make_tvtensor_cases()["boxes_cxcywhr"],
    "nested": {"a": [torch.zeros(0, 3), (1.5, None, "s")], 7: torch.ones(3, 3).expand(2, 3, 3)},
}
MESSAGES = {name: tc.encode(obj) for name, obj in SEEDS.items()}

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(
        ["float32", "bool", "tensor", "tv.BoundingBoxes", "dict", "namedtuple", "PackedSequence", "XYXY", "host"]
    ),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def decode_or_codec_error(value, metadata):
    try:
        out = tc.decode(value, metadata)
    except tc.CodecError:
        return None
    tc.release(out)  # whatever was accepted can be released
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(MESSAGES)), data=st.data())
def test_mutated_header_values(name, data):
    value, metadata = MESSAGES[name]
    header = json.loads(metadata["tc.header"])
    paths = list(_paths(header))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        replacement = data.draw(json_values)
        if not path:
            header = replacement
            break
        parent = header
        try:
            for part in path[:-1]:
                parent = parent[part]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = replacement
        except (KeyError, IndexError, TypeError):
            pass
    decode_or_codec_error(value, {**metadata, "tc.header": json.dumps(header)})


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(MESSAGES)), data=st.data())
def test_mutated_header_text(name, data):
    value, metadata = MESSAGES[name]
    text = metadata["tc.header"]
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 8)))
    insert = data.draw(st.text(max_size=6))
    decode_or_codec_error(value, {**metadata, "tc.header": text[:start] + insert + text[end:]})


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(MESSAGES)),
    key=st.sampled_from(["tc.version", "tc.transport", "tc.header"]),
    replacement=json_values,
)
def test_mutated_metadata_values(name, key, replacement):
    value, metadata = MESSAGES[name]
    decode_or_codec_error(value, {**metadata, key: replacement})


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(MESSAGES)), data=st.data())
def test_truncated_extended_and_corrupted_buffers(name, data):
    value, metadata = MESSAGES[name]
    raw = bytearray(value.buffers()[1].to_pybytes()[: len(value)]) if len(value) else bytearray()
    choice = data.draw(st.sampled_from(["truncate", "extend", "flip", "replace"]))
    if choice == "truncate" and raw:
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif choice == "extend":
        raw += data.draw(st.binary(min_size=1, max_size=128))
    elif choice == "flip" and raw:
        for _ in range(data.draw(st.integers(1, 8))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    else:
        raw = bytearray(data.draw(st.binary(max_size=512)))
    decode_or_codec_error(pa.array(list(raw), pa.uint8()), metadata)


foreign_values = st.one_of(
    st.lists(st.integers(-100, 100), max_size=20).map(lambda xs: pa.array(xs, pa.int64())),
    st.lists(st.floats(allow_nan=True), max_size=20).map(lambda xs: pa.array(xs, pa.float64())),
    st.lists(st.text(max_size=5), max_size=5).map(pa.array),
    st.lists(st.one_of(st.none(), st.integers(0, 255)), max_size=20).map(lambda xs: pa.array(xs, pa.uint8())),
    st.binary(max_size=64),
    st.none(),
    st.integers(),
)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(MESSAGES)), value=foreign_values)
def test_foreign_values(name, value):
    _, metadata = MESSAGES[name]
    decode_or_codec_error(value, metadata)


@settings(max_examples=200, deadline=None)
@given(
    metadata=st.one_of(
        json_values,
        st.dictionaries(st.sampled_from(["tc.version", "tc.transport", "tc.header", "timestamp"]), json_values),
    )
)
def test_arbitrary_metadata(metadata):
    decode_or_codec_error(pa.array([], pa.uint8()), metadata)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_seeds_themselves_decode(name):
    value, metadata = MESSAGES[name]
    assert decode_or_codec_error(value, metadata) is not None
