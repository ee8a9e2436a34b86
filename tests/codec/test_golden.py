"""Golden fixtures: the exact bytes and metadata of wire format v2 for a set of objects.

A change to the format must be deliberate: bump the version, document it in
docs/wire-format.md, and regenerate with `.venv/bin/python tests/codec/test_golden.py --regenerate`.
Each fixture is checked both ways: encoding the object gives exactly the stored message, and
decoding the stored message gives exactly the object.

golden/refused/ holds messages a receiver must refuse, each with a fragment of the error: the
rules a writer in another language must follow that the encoder here never breaks.
"""

from __future__ import annotations

import collections
import json
import math
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from torch.nn.utils.rnn import pack_sequence
from torchvision import tv_tensors as tvt

import tensor_codec as tc
from tensor_codec.testing import assert_identical

GOLDEN = Path(__file__).resolve().parents[1] / "golden"  # tests/golden
Corner = tc.register_namedtuple(collections.namedtuple("Corner", ["x", "y"]), "golden.Corner")


def _bits(dtype, values):
    return torch.tensor(values, dtype=torch.uint8).view(dtype)


FIXTURES = {
    "stacked_float32": lambda: torch.stack([torch.arange(6.0).reshape(2, 3), torch.arange(6.0, 12.0).reshape(2, 3)]),
    "transposed_int16": lambda: torch.arange(6, dtype=torch.int16).reshape(2, 3).t(),
    "expanded_float64": lambda: torch.arange(3, dtype=torch.float64).expand(2, 3),
    "strided_crop_uint8": lambda: torch.arange(24, dtype=torch.uint8).reshape(4, 6)[1::2, ::2],
    "channels_last_int8": lambda: (
        torch.arange(24, dtype=torch.int8).reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last)
    ),
    "bool": lambda: torch.tensor([[True, False, True]]),
    "bfloat16_bits": lambda: _bits(torch.bfloat16, [0, 0, 128, 63, 192, 127, 1, 128]),
    "float8_e4m3fn_bits": lambda: _bits(torch.float8_e4m3fn, [0, 56, 127, 255]),
    "complex64": lambda: torch.tensor([1 + 2j, -3.5j], dtype=torch.complex64),
    "zero_dim_and_empty": lambda: [torch.tensor(7, dtype=torch.int64), torch.zeros(0, 3)],
    "requires_grad": lambda: torch.tensor([0.5, -0.25]).requires_grad_(),
    "image_video_mask": lambda: {
        "image": tvt.Image(torch.arange(12, dtype=torch.uint8).reshape(3, 2, 2)),
        "video": tvt.Video(torch.zeros(2, 1, 2, 2, dtype=torch.uint8)),
        "mask": tvt.Mask(torch.tensor([[True, False], [False, True]])),
    },
    "bounding_boxes": lambda: tvt.BoundingBoxes(
        torch.tensor([[1.0, 2.0, 3.0, 4.0]]), format="XYWH", canvas_size=(10, 20), clamping_mode="hard"
    ),
    "key_points": lambda: tvt.KeyPoints(torch.tensor([[1.5, 2.5], [3.0, 4.0]]), canvas_size=(8, 9)),
    "packed_sequence": lambda: pack_sequence(
        [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0, 5.0])], enforce_sorted=False
    ),
    "nested_values": lambda: {
        "labels": torch.tensor([3, 1], dtype=torch.int32),
        "meta": {"frame": 42, "source": "cam/0", "ok": True, "none": None, "ratio": 0.5, "nan": math.nan, 7: "seven"},
        "pair": (1, [2.0, "x"]),
        "corner": Corner(-1, 2),
    },
    "empty_dict": lambda: {},
}


def _zero_dim_and_empty(header_change=None, data_change=None):
    data = json.loads(_path("zero_dim_and_empty").read_text())
    raw = bytearray.fromhex(data["data_hex"])
    metadata = dict(data["metadata"])
    if header_change:
        metadata["tc.header"] = header_change(metadata["tc.header"])
    if data_change:
        data_change(raw)
    return metadata, bytes(raw)


def _set_byte(index, value):
    def change(raw):
        raw[index] = value

    return change


# name -> (the message, as metadata and bytes, made from a valid fixture; a fragment of the error)
REFUSED = {
    "nonzero_padding": (
        lambda: _zero_dim_and_empty(data_change=_set_byte(9, 0xAB)),
        "expected zero padding before tc.header.leaves[1]",
    ),
    "duplicate_member": (
        lambda: _zero_dim_and_empty(header_change=lambda h: h.replace('"nbytes":8,', '"nbytes":8,"nbytes":8,')),
        "'nbytes' twice",
    ),
    "broadcast_past_logical_limit": (
        lambda: (
            {
                "tc.header": '{"version":2,"transport":"host","leaves":[{"dtype":"float32",'
                '"shape":[1152921504606846976],"strides":[0],"nbytes":4,"offset":0}],"tree":{"t":"tensor","leaf":0}}',
            },
            bytes(4),
        ),
        "tc.header.leaves[0].shape: expected at most 4294967296 logical bytes per tensor",
    ),
    # stacked_float32 as wire format 1 wrote it (its version and transport in keys of their own):
    # named as a message of an older sender, never read as one of this format.
    "version_1": (
        lambda: (
            {
                "tc.version": 1,
                "tc.transport": "host",
                "tc.header": '{"leaves":[{"dtype":"float32","shape":[2,2,3],"strides":[6,3,1],"nbytes":48,'
                '"offset":0}],"tree":{"t":"tensor","leaf":0}}',
            },
            bytes(torch.arange(12.0).numpy().tobytes()),
        ),
        "tc.version: expected no such key (wire format 2 keeps its version in tc.header), got 1",
    ),
}


def _refused_path(name: str) -> Path:
    return GOLDEN / "refused" / f"{name}.json"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_refused_golden_messages_are_refused_naming_the_rule(name):
    data = json.loads(_refused_path(name).read_text())
    raw = bytes.fromhex(data["data_hex"])
    with pytest.raises(tc.DecodeError) as info:
        tc.decode(pa.array(list(raw), pa.uint8()) if raw else pa.array([], pa.uint8()), data["metadata"])
    assert data["error"] in str(info.value)


def test_every_refused_file_has_a_case_and_matches_it():
    assert {p.stem for p in (GOLDEN / "refused").glob("*.json")} == set(REFUSED)
    for name, (make, fragment) in REFUSED.items():
        metadata, raw = make()
        assert json.loads(_refused_path(name).read_text()) == {
            "metadata": metadata,
            "data_hex": raw.hex(),
            "error": fragment,
        }


def _path(name: str) -> Path:
    return GOLDEN / f"{name}.json"


def _stored(name: str) -> tuple[pa.Array, dict]:
    data = json.loads(_path(name).read_text())
    raw = bytes.fromhex(data["data_hex"])
    return pa.array(list(raw), pa.uint8()) if raw else pa.array([], pa.uint8()), data["metadata"]


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_encoding_matches_the_golden_bytes_and_metadata(name):
    value, metadata = tc.encode(FIXTURES[name]())
    stored_value, stored_metadata = _stored(name)
    assert metadata == stored_metadata
    assert value.to_pylist() == stored_value.to_pylist()


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_the_golden_message_decodes_to_the_object(name):
    value, metadata = _stored(name)
    assert_identical(tc.decode(value, metadata), FIXTURES[name]())


def test_every_fixture_file_has_a_fixture():
    assert {p.stem for p in GOLDEN.glob("*.json")} == set(FIXTURES)


def regenerate() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for name, make in FIXTURES.items():
        value, metadata = tc.encode(make())
        raw = value.buffers()[1].to_pybytes()[: len(value)] if len(value) else b""
        _path(name).write_text(
            json.dumps({"metadata": metadata, "data_hex": raw.hex()}, indent=1, ensure_ascii=False) + "\n"
        )
        print("wrote", _path(name))
    (GOLDEN / "refused").mkdir(exist_ok=True)
    for name, (make, fragment) in REFUSED.items():
        metadata, raw = make()
        _refused_path(name).write_text(
            json.dumps({"metadata": metadata, "data_hex": raw.hex(), "error": fragment}, indent=1) + "\n"
        )
        print("wrote", _refused_path(name))


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python tests/codec/test_golden.py --regenerate")
    regenerate()


@pytest.mark.parametrize(
    "obj",
    [
        {"t": "tv.BoundingBoxes", "leaf": 0, "format": "XYXY", "canvas_size": [480, 640], "clamping_mode": "soft"},
        {"t": "dict", "items": [["é\U0001f600", {"t": "float", "v": 1.5e-300}], ["k", None], ['"q\\', [True, -2]]]},
        [{"dtype": "float32", "shape": [2, 3], "strides": [3, 1], "nbytes": 24, "offset": 0}],
        {"gpu": "GPU-0a1b"},
    ],
    ids=["boxes-tree", "text-floats-nesting", "leaf-table", "transport-keys"],
)
def test_header_text_is_jsonencoders_text_with_its_encoder_made_once(obj):
    """The writer keeps one C encoder (wire._encode) instead of the one JSONEncoder.encode makes
    per call: the same text for every kind of value a header holds, and the same refusal of a
    float JSON cannot carry."""
    from tensor_codec.wire import header as wire

    assert wire._encode(obj) == wire._JSON.encode(obj)
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="not JSON compliant"):
            wire._encode({"v": bad})
