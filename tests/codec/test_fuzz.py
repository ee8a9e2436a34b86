"""Property-based: mutated metadata, mutated headers and truncated or foreign buffers never raise
anything but CodecError (and never crash the process).

Wire format 2: the one codec key is ``tc.header``, whose JSON holds the version and the transport
(``{"version":2,"transport":"host","leaves":...,"tree":...}``). What version 1 kept in metadata
keys is mutated here as the header's members; version 1's ``tc.version`` key beside a header must
make any message refused."""

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
        + ["cuda-ipc", "HOST", "host ", 2, 1, 2.0, "2"]
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


VERSION = 2  # the wire format's version, as the header's `version` member holds it
STRAY_VERSION = r"^tc\.version: expected no such key"


def decode_or_codec_error(value, metadata):
    try:
        out = tc.decode(value, metadata)
    except tc.CodecError:
        return None
    tc.release(out)  # whatever was accepted can be released
    return out


def accepted(value, metadata) -> bool:
    """Whether the message decodes (anything else than a CodecError fails the test)."""
    try:
        out = tc.decode(value, metadata)
    except tc.CodecError:
        return False
    tc.release(out)
    return True


def assert_a_reader_may_accept(metadata):
    """A decoded message is wire format 2: no tc.version key, the header's version the int 2 and its
    transport host (the only one these messages can decode through)."""
    header = json.loads(metadata["tc.header"])
    assert "tc.version" not in metadata, metadata
    assert type(header["version"]) is int and header["version"] == VERSION, header["version"]
    assert header["transport"] == "host", header["transport"]


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


envelope_values = st.one_of(
    json_values,
    st.sampled_from([VERSION, VERSION - 1, VERSION + 1, 99, 0, -VERSION, 2**63, float(VERSION), True, str(VERSION)]),
    st.sampled_from(["host", "cuda-ipc", "HOST", "cuda_ipc", "host\u0000", " host", "", "ipc", "auto"]),
)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(MESSAGES)),
    member=st.sampled_from(["version", "transport"]),
    how=st.sampled_from(["replace", "delete", "move"]),
    replacement=envelope_values,
)
def test_mutated_header_version_and_transport(name, member, how, replacement):
    """Version 1's mutated tc.version and tc.transport keys, as the header's members: other values
    and types, deleted, moved after the tree. A message that still decodes says version 2, host."""
    value, metadata = MESSAGES[name]
    header = json.loads(metadata["tc.header"])
    if how == "replace":
        header[member] = replacement
    else:
        moved = header.pop(member)
        if how == "move":
            header[member] = moved
    mutated = {**metadata, "tc.header": json.dumps(header, separators=(",", ":"))}
    if accepted(value, mutated):
        assert_a_reader_may_accept(mutated)
    wrong_version = member == "version" and (type(replacement) is not int or replacement != VERSION)
    if how == "delete" or (how == "replace" and wrong_version):
        with pytest.raises(tc.DecodeError, match=rf"^tc\.header(\.{member})?: expected"):  # or its JSON (int64)
            tc.decode(value, mutated)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(MESSAGES)),
    key=st.sampled_from(["tc.header", "tc.version", "tc.transport"]),
    replacement=json_values,
)
def test_mutated_metadata_values(name, key, replacement):
    """tc.header replaced; version 1's keys added beside it (tc.version: refused, whatever it says)."""
    value, metadata = MESSAGES[name]
    mutated = {**metadata, key: replacement}
    if key == "tc.version":
        with pytest.raises(tc.DecodeError, match=STRAY_VERSION):
            tc.decode(value, mutated)
    elif accepted(value, mutated):
        assert_a_reader_may_accept(mutated)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_version_1_messages_are_refused(name):
    """The message a version-1 sender writes (tc.version, tc.transport and a header without them),
    and a version 2 message with a stray tc.version, are refused and named as such."""
    value, metadata = MESSAGES[name]
    header = json.loads(metadata["tc.header"])
    transport = header.pop("transport")
    del header["version"]
    v1 = {"tc.version": 1, "tc.transport": transport, "tc.header": json.dumps(header, separators=(",", ":"))}
    for mutated in (v1, {**metadata, "tc.version": 1}, {**metadata, "tc.version": VERSION, "tc.transport": "host"}):
        with pytest.raises(tc.DecodeError, match=STRAY_VERSION):
            tc.decode(value, mutated)


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


headers = st.one_of(json_values, st.sampled_from(sorted(m["tc.header"] for _, m in MESSAGES.values())))


@settings(max_examples=200, deadline=None)
@given(
    metadata=st.one_of(
        json_values,
        st.dictionaries(st.sampled_from(["tc.version", "tc.transport", "tc.header", "timestamp"]), headers),
    )
)
def test_arbitrary_metadata(metadata):
    value = pa.array([], pa.uint8())
    if accepted(value, metadata):
        assert_a_reader_may_accept(metadata)
    if isinstance(metadata, dict) and "tc.version" in metadata:
        with pytest.raises(tc.DecodeError, match=STRAY_VERSION):
            tc.decode(value, metadata)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_seeds_themselves_decode(name):
    value, metadata = MESSAGES[name]
    assert decode_or_codec_error(value, metadata) is not None
