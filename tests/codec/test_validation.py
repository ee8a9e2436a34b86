"""Decoding treats every message as hostile: each defect is a DecodeError naming the field,
what was expected and what came, found before any data byte is interpreted."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec.wire import header_json
from tensor_codec.wire.structure import MAX_DEPTH
from tests.support.wire import codec_metadata


def message(obj=None):
    obj = torch.arange(1200, dtype=torch.float32).reshape(30, 40) if obj is None else obj
    return tc.encode(obj)


def edit_header(metadata: dict, edit) -> dict:
    header = json.loads(metadata["tc.header"])
    edit(header)
    return {**metadata, "tc.header": json.dumps(header)}


def leaf(**changes):
    def edit(header):
        header["leaves"][0].update(changes)

    return edit


def expect_error(value, metadata, *fragments):
    with pytest.raises(tc.DecodeError) as info:
        tc.decode(value, metadata)
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    assert isinstance(info.value, ValueError)
    return text


def test_a_messages_transport_is_read_from_its_validated_header():
    value, metadata = message()
    assert tc.message_transport(metadata) == "host"
    with pytest.raises(tc.DecodeError, match=r"^tc.header.version: expected 2, got 3$"):
        tc.message_transport(_with_member(metadata, "version", "3"))
    with pytest.raises(tc.DecodeError, match=r"^tc.version: expected no such key"):
        tc.message_transport({**metadata, "tc.version": 1})


class _Lying(dict):
    """A dict that says it has every key and holds none of them."""

    def __contains__(self, key):
        return True


def test_metadata_that_lies_about_its_keys_is_refused_not_crashed_on():
    value, metadata = message()
    with pytest.raises(tc.DecodeError, match=r"^tc.version: expected no such key .* got None"):
        tc.decode(value, _Lying(metadata))


def test_missing_header_says_it_is_not_a_codec_message():
    value, _ = message()
    expect_error(value, {"timestamp": 1}, "tc.header", "not a tensor_codec message")


@pytest.mark.parametrize("header", [None, 1, b"{}", ["{}"]])
def test_a_header_that_is_no_string(header):
    value, _ = message()
    expect_error(value, {"tc.header": header}, "tc.header: expected a JSON string", type(header).__name__)


@pytest.mark.parametrize("version", [1, 2, "1", None])
def test_a_version_1_message_is_named_not_misread(version):
    """Version 1 carried its version in a key of its own beside tc.header: a message that has one
    was written by an older sender, whatever its header says."""
    value, metadata = message()
    expect_error(value, {**metadata, "tc.version": version}, "tc.version", "older wire format", repr(version))


def _with_member(metadata: dict, name: str, text: str | None) -> dict:
    """The message's header with its member `name` given the JSON `text` (None: without it)."""

    def edit(header):
        if text is None:
            del header[name]
        else:
            header[name] = json.loads(text)

    return edit_header(metadata, edit)


@pytest.mark.parametrize("version", ["0", "1", "3", '"2"', "2.0", "true", "null", None])
def test_wrong_version(version):
    value, metadata = message()
    got = "missing" if version is None else repr(json.loads(version))
    expect_error(value, _with_member(metadata, "version", version), "tc.header.version", "expected 2", got)


@pytest.mark.parametrize("transport", ['"teleport"', '"HOST"', "1", "null", None])
def test_unknown_transport(transport):
    value, metadata = message()
    got = "missing" if transport is None else repr(json.loads(transport))
    expect_error(value, _with_member(metadata, "transport", transport), "tc.header.transport", got)


def test_an_unknown_transport_is_named_with_those_that_exist():
    value, metadata = message()
    teleport = _with_member(metadata, "transport", '"teleport"')
    expect_error(value, teleport, "tc.header.transport", "'host'", "'teleport'")


@pytest.mark.parametrize(
    "header, fragment",
    [
        ("{", "valid JSON"),
        ("[]", "JSON object"),
        ('{"leaves": [], "tree": NaN}', "non-standard constant NaN"),
        ("[" * 100000 + "]" * 100000, "items"),  # refused by its count, before the parser recurses
        # Within the item limit, refused by the codec's own nesting bound before the parser runs:
        # Python's json guard differs by version (3.11 stops near 1,000 levels, 3.12 parses 5,000).
        ("[" * 5000 + "]" * 5000, "expected at most 256 nesting levels of JSON arrays and objects, got 5000"),
        ('{"leaves": [], "tree": ' + "[" * 257 + "]" * 257 + "}", "got 258"),
        ('{"leaves": [], "tree": null, "extra": 1}', "unexpected ['extra']"),
        ('{"leaves": []}', "'tree'"),
        ('{"leaves": {}, "tree": null}', "tc.header.leaves: expected a list"),
    ],
)
def test_malformed_headers(header, fragment):
    expect_error(pa.array([], pa.uint8()), codec_metadata(header), fragment)


def test_nesting_is_counted_outside_string_literals():
    assert header_json.nesting('["]]]]", [[{"a": "[[[["}]]]') == 4
    assert header_json.nesting('"[[[["') == 0 and header_json.nesting("7") == 0
    assert header_json.nesting('"["') == 0  # one bracket, in a string: no nesting, however few brackets there are
    # Brackets in strings neither hide a deep header nor refuse a shallow one.
    deep = '{"leaves": [], "tree": "' + "]" * 300 + '", "x": ' + "[" * 300 + "]" * 300 + "}"
    assert header_json.nesting(deep) == 301
    shallow = '{"leaves": [], "tree": {"t": "str", "v": "' + "[" * 300 + '"}}'
    assert header_json.nesting(shallow) == 2


@pytest.mark.parametrize("container", ["dict", "list"])
def test_the_deepest_structure_the_encoder_takes_fits_the_nesting_bound(container):
    """The bound follows from the structure depth (wire.structure.MAX_DEPTH): every header the encoder writes
    is within it, and decodes."""
    leaf_ = tv_tensors.BoundingBoxes(torch.zeros(1, 4), format="XYXY", canvas_size=(4, 4))
    obj = leaf_
    for _ in range(MAX_DEPTH):
        obj = {"k": obj} if container == "dict" else [obj]
    value, metadata = tc.encode(obj)
    assert header_json.nesting(metadata["tc.header"]) <= header_json.MAX_NESTING
    got = tc.decode(value, metadata)
    for _ in range(MAX_DEPTH):
        got = got["k"] if container == "dict" else got[0]
    assert type(got) is tv_tensors.BoundingBoxes and torch.equal(got, leaf_)


def test_header_size_cap():

    huge = " " * (tc.get_limits().header_bytes + 1)
    expect_error(pa.array([], pa.uint8()), {"tc.header": huge}, "tc.header", "at most")


@pytest.mark.parametrize(
    "changes, fragments",
    [
        ({"dtype": "float128"}, ["leaves[0].dtype", "float128"]),
        ({"dtype": "object"}, ["leaves[0].dtype", "'object'"]),
        ({"dtype": 7}, ["leaves[0].dtype", "7"]),
        ({"shape": [30, -40]}, ["leaves[0].shape", "-40"]),
        ({"shape": [30, 40.0]}, ["leaves[0].shape", "40.0"]),
        ({"shape": "30x40"}, ["leaves[0].shape", "list"]),
        ({"shape": [1] * 65}, ["leaves[0].shape", "65 entries"]),
        ({"strides": [40]}, ["leaves[0].strides", "expected 2 entries", "got 1"]),
        ({"strides": [40, 2]}, ["leaves[0].strides", "dense layout"]),
        ({"strides": [1, 1]}, ["leaves[0].strides", "dense layout"]),
        ({"nbytes": 4799}, ["leaves[0].nbytes", "expected 4800", "got 4799"]),
        ({"nbytes": -1}, ["leaves[0].nbytes", "-1"]),
        ({"offset": 64}, ["leaves[0].offset", "expected 0", "got 64"]),
        ({"offset": "0"}, ["leaves[0].offset", "'0'"]),
        ({"shape": [2**40, 2**40], "strides": [2**40, 1], "nbytes": 2**62}, ["leaves[0].shape", "logical bytes"]),
        ({"shape": [2**62, 2**62, 0], "strides": [0, 0, 0], "nbytes": 0}, ["leaves[0].shape", "non-zero sizes"]),
        ({"shape": [2**32, 2**32, 0], "strides": [0, 0, 0], "nbytes": 0}, ["leaves[0].shape", "non-zero sizes"]),
    ],
)
def test_leaf_defects_name_the_field(changes, fragments):
    value, metadata = message()
    expect_error(value, edit_header(metadata, leaf(**changes)), *fragments)


def test_missing_and_extra_leaf_keys():
    value, metadata = message()

    def drop(header):
        del header["leaves"][0]["strides"]

    expect_error(value, edit_header(metadata, drop), "leaves[0]", "missing ['strides']")
    expect_error(value, edit_header(metadata, leaf(handle="0xdead")), "leaves[0]", "unexpected ['handle']")


def test_offsets_must_follow_the_canonical_layout():
    value, metadata = message([torch.zeros(3), torch.zeros(5)])

    def overlap(header):
        header["leaves"][1]["offset"] = 0

    expect_error(value, edit_header(metadata, overlap), "leaves[1].offset", "expected 64", "got 0")


@pytest.mark.parametrize("cut", [1, 64, 4799])
def test_truncated_buffer(cut):
    value, metadata = message()
    expect_error(
        value.slice(0, len(value) - cut), metadata, "value", f"expected {len(value)} bytes", f"got {len(value) - cut}"
    )


def test_buffer_longer_than_the_header_says():
    value, metadata = message(torch.zeros(4))
    longer = pa.array(value.to_pylist() + [0], pa.uint8())
    expect_error(longer, metadata, "value", "expected 16 bytes", "got 17")


@pytest.mark.parametrize(
    "value, fragment",
    [
        (pa.array([True] * 4800), "Arrow type uint8"),  # bits, not bytes: no fixed-width type
        (pa.array([b"x"]), "Arrow type uint8"),
        (b"\0" * 4800, "pyarrow.Array"),
        (pa.array([None] * 4800, pa.uint8()), "no nulls"),
    ],
)
def test_foreign_values(value, fragment):
    _, metadata = message()
    expect_error(value, metadata, fragment)


def test_bool_bytes_other_than_zero_or_one_are_refused():
    value, metadata = message(torch.tensor([True, False, True]))
    raw = bytearray(value.to_pylist())
    raw[1] = 2
    expect_error(pa.array(list(raw), pa.uint8()), metadata, "leaves[0]", "bool bytes 0 or 1")


@pytest.mark.parametrize(
    "tree, fragments",
    [
        ({"t": "tensor", "leaf": 1}, ["tree.leaf", "expected leaf index 0", "got 1"]),
        ({"t": "tensor", "leaf": "0"}, ["tree.leaf", "'0'"]),
        (
            {"t": "list", "items": [{"t": "tensor", "leaf": 0}, {"t": "tensor", "leaf": 0}]},
            ["items[1].leaf", "all leaves used"],
        ),
        ({"t": "list", "items": []}, ["every one of the 1 leaves", "got 0"]),
        ({"t": "pickle", "leaf": 0}, ["tree.t", "'pickle'"]),
        ({"t": "tensor", "leaf": 0, "grad": "yes"}, ["tree.grad", "'yes'"]),
        ({"t": "tensor", "leaf": 0, "device": "cuda"}, ["tree", "unexpected ['device']"]),
        ({"t": "tv.BoundingBoxes", "leaf": 0, "format": "XYZ", "canvas_size": [1, 2]}, ["tree.format", "'XYZ'"]),
        ({"t": "tv.BoundingBoxes", "leaf": 0, "format": "XYXY", "canvas_size": [1]}, ["tree.canvas_size", "[1]"]),
        ({"t": "tv.BoundingBoxes", "leaf": 0, "format": "XYXY"}, ["tree", "missing ['canvas_size']"]),
        (
            {"t": "tv.BoundingBoxes", "leaf": 0, "format": "XYXY", "canvas_size": [1, 2], "clamping_mode": "tight"},
            ["tree.clamping_mode", "'tight'"],
        ),
        ({"t": "tv.KeyPoints", "leaf": 0, "canvas_size": [-1, 2]}, ["tree.canvas_size", "-1"]),
        ({"t": "dict", "items": [["a", {"t": "tensor", "leaf": 0}], ["a", 1]]}, ["items[1][0]", "unique keys"]),
        ({"t": "dict", "items": [[1.5, {"t": "tensor", "leaf": 0}]]}, ["items[0][0]", "1.5"]),
        ({"t": "dict", "items": [["a"]]}, ["items[0]", "[key, value] pair"]),
        ({"t": "float", "v": "huge"}, ["tree.v", "'huge'"]),
        (
            {"t": "namedtuple", "name": "os.system", "fields": ["__class__"], "items": [1]},
            ["tree.fields", "identifiers"],
        ),
        ({"t": "namedtuple", "name": "P", "fields": ["x", "y"], "items": [1]}, ["tree.items", "expected 2 items"]),
        ({"t": "namedtuple", "name": "P", "fields": ["x", "x"], "items": [1, 2]}, ["tree.fields", "distinct"]),
        ({"t": "namedtuple", "name": "P", "fields": ["if"], "items": [1]}, ["tree.fields", "keyword"]),
        ([1, 2], ["tree", "array"]),
        (
            {"t": "namedtuple", "name": "Wide", "fields": [f"f{i}" for i in range(1025)], "items": list(range(1025))},
            ["tree.fields", "at most 1024", "1025 fields"],
        ),
        ({"t": "list", "items": [2**64]}, ["items[0]", "int64"]),  # 20 digits: parsed, then refused by the tree
        ({"t": "list", "items": [2**70]}, ["tc.header", "int64", "22 characters"]),  # refused unconverted
    ],
)
def test_tree_defects_name_the_node(tree, fragments):
    value, metadata = message(torch.zeros(2, 4))

    def replace(header):
        header["tree"] = tree

    expect_error(value, edit_header(metadata, replace), *fragments)


def test_deeply_nested_tree_is_refused():
    value, metadata = message(0)
    tree: object = 0
    for _ in range(200):
        tree = {"t": "list", "items": [tree]}

    def replace(header):
        header["tree"] = tree

    expect_error(value, edit_header(metadata, replace), "nesting levels")


@pytest.mark.parametrize(
    "tree, fragment",
    [
        (
            {
                "t": "PackedSequence",
                "data": {"t": "tensor", "leaf": 0},
                "batch_sizes": 3,
                "sorted_indices": None,
                "unsorted_indices": None,
            },
            "batch_sizes: expected a tensor",
        ),
        (
            {
                "t": "PackedSequence",
                "data": {"t": "tensor", "leaf": 0},
                "batch_sizes": {"t": "tensor", "leaf": 1},
                "sorted_indices": None,
                "unsorted_indices": None,
            },
            "1-D int64",
        ),
    ],
)
def test_packed_sequence_parts_are_checked(tree, fragment):
    value, metadata = message([torch.zeros(4), torch.zeros(2, dtype=torch.float32)])

    def replace(header):
        header["tree"] = tree

    expect_error(value, edit_header(metadata, replace), fragment)


def test_grad_on_an_integer_tensor_is_refused():
    value, metadata = message(torch.zeros(3, dtype=torch.int32))

    def replace(header):
        header["tree"]["grad"] = True

    expect_error(value, edit_header(metadata, replace), "tree.grad", "int32")


def test_receive_requires_an_input_event():
    with pytest.raises(tc.DecodeError, match="event.type: expected 'INPUT', got 'STOP'"):
        tc.receive({"type": "STOP"})
    with pytest.raises(tc.DecodeError, match="'value'"):
        tc.receive({"type": "INPUT", "metadata": {}})


def test_the_header_cache_keeps_only_small_trees_within_a_node_budget():
    """Review finding: 256 cached headers of 31,000 nodes each retained 2 GB."""
    from tensor_codec import received

    value, metadata = message(torch.zeros(2, 4))
    big_tree = {"t": "list", "items": [{"t": "tensor", "leaf": 0}] + [0] * 10_000}

    def replace(header):
        header["tree"] = big_tree

    big = edit_header(metadata, replace)
    tc.decode(value, big)
    assert received.cached(big["tc.header"]) is None
    for i in range(400):  # distinct medium trees: the budget, not the entry count, binds
        tree = {"t": "list", "items": [{"t": "tensor", "leaf": 0}, i] + [0] * 1000}
        tc.decode(value, edit_header(metadata, lambda h, tree=tree: h.__setitem__("tree", tree)))
    assert received._cache.cost <= received._CACHE_NODE_BUDGET
    assert received._cache.cost == sum(cost for _, cost in received._cache.values())


def test_the_leaf_tables_kept_apart_from_their_trees_stay_within_entries_and_a_leaf_budget(monkeypatch):
    from tensor_codec import received

    monkeypatch.setattr(received, "_CACHE_NODE_BUDGET", 50)
    received.forget_all()
    for i in range(300):  # distinct tables of 11 leaves: the budget binds
        tc.decode(*tc.encode([torch.zeros(i + 1)] + [torch.zeros(2)] * 10))
    assert 0 < len(received._tables) <= 50 // 11
    assert received._tables.cost == sum(cost for _, cost in received._tables.values())
    monkeypatch.undo()
    received.forget_all()
    for i in range(300):  # one leaf each: the entry count binds
        tc.decode(*tc.encode(torch.zeros(i + 1)))
    assert len(received._tables) == received._CACHE_ENTRIES
    received.forget_all()


def test_a_number_too_large_for_a_float_is_refused_not_read_as_infinity():
    value, metadata = message(torch.zeros(2, 4))

    def replace(header):
        header["tree"] = {"t": "list", "items": [{"t": "tensor", "leaf": 0}, 12345.5]}

    edited = edit_header(metadata, replace)
    edited["tc.header"] = edited["tc.header"].replace("12345.5", "1e400")
    expect_error(value, edited, "items[1]", "finite number", "inf")
