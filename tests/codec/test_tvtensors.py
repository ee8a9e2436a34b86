"""TVTensors: every class and attribute survives every path (failure mode 3)."""

from __future__ import annotations

import pytest
import torch
from torchvision import tv_tensors as tvt

import tensor_codec as tc
from tensor_codec.lifetimes import is_borrowed
from tensor_codec.testing import assert_identical, make_detection_sample, make_tvtensor_cases
from tests.support.calls import with_c_calls_named

CASES = make_tvtensor_cases()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("copy", [False, True], ids=["zero_copy", "copy"])
def test_every_tvtensor_case_round_trips_with_class_and_attributes(name, copy):
    original = CASES[name]
    restored = tc.decode(*tc.encode(original), copy=copy)
    assert_identical(restored, original)


def _tvtensors_in(obj) -> list:
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tvtensors_in(v)]
    return [obj] if isinstance(obj, tvt.TVTensor) else []


def test_a_leaf_the_decode_copied_becomes_its_object_no_second_tensor_object_made():
    """A leaf the decode copied (a small message's, every leaf with copy=True) is its own and
    tracked by nothing: it becomes its TVTensor in place (wire.kinds.handed_out_as, ``owned``), no
    `_make_subclass` call however reached, with its class, attributes, grad flag and bytes. The
    first message of a header (compiled) and later ones (seen) alike. A leaf the message lends
    (zero-copy, over 4 KiB) is still a tensor object of its own over the message's memory, which
    release empties (tensor_codec/lifetimes.py)."""
    boxes = tvt.BoundingBoxes(torch.rand(64, 4), format="XYXY", canvas_size=(480, 640))  # 1 KB: copied
    with_grad = tvt.BoundingBoxes(torch.rand(3, 4), format="CXCYWH", canvas_size=(9, 9)).requires_grad_()
    everything = {"boxes": boxes, "with_grad": with_grad, "cases": dict(CASES)}
    for obj, copy in ((boxes, False), (with_grad, False), (everything, True)):
        value, metadata = tc.encode(obj)
        for _ in range(2):  # the header compiled, then seen
            got, made = with_c_calls_named("_make_subclass", tc.decode, value, metadata, copy=copy)
            assert made == 0
            assert_identical(got, obj)
            assert not any(is_borrowed(t) or t._base is not None for t in _tvtensors_in(got))
    big = tvt.BoundingBoxes(torch.rand(512, 4), format="XYXY", canvas_size=(480, 640))  # 8 KB: lent
    value, metadata = tc.encode(big)
    with tc.scope():
        got, made = with_c_calls_named("_make_subclass", tc.decode, value, metadata)
        assert made == 1 and is_borrowed(got)
        assert_identical(got, big)
    assert got.as_subclass(torch.Tensor).numel() == 0  # released at the scope's end


def test_every_bounding_box_format_and_clamping_mode_is_covered():
    formats = {c.format for c in CASES.values() if isinstance(c, tvt.BoundingBoxes)}
    assert formats == set(tvt.BoundingBoxFormat)
    modes = {c.clamping_mode for c in CASES.values() if isinstance(c, tvt.BoundingBoxes)}
    assert modes == {"soft", "hard", None}


def test_tvtensors_inside_nested_structures():
    obj = {
        "batch": [make_detection_sample(seed=s) for s in range(3)],
        "video": (CASES["video"], {"mask": CASES["mask"]}),
    }
    assert_identical(tc.decode(*tc.encode(obj)), obj)


def test_boxes_requiring_grad_keep_class_attributes_and_flag():
    boxes = tvt.BoundingBoxes(torch.rand(3, 4), format="CXCYWH", canvas_size=(9, 9)).requires_grad_()
    restored = tc.decode(*tc.encode(boxes))
    assert type(restored) is tvt.BoundingBoxes and restored.requires_grad
    assert restored.format is tvt.BoundingBoxFormat.CXCYWH and restored.canvas_size == (9, 9)


def test_a_two_dim_image_stays_two_dim():
    # tv_tensors.Image(2-D tensor) would add a channel dim; the codec must not.
    image = torch.zeros(4, 5).as_subclass(tvt.Image)
    assert tc.decode(*tc.encode(image)).shape == (4, 5)


def test_map_tensors_keeps_every_class_and_attribute():
    obj = {"sample": make_detection_sample(), "keypoints": CASES["keypoints"], "boxes": CASES["boxes_xywhr"]}
    doubled = tc.map_tensors(lambda t, original: t * 2, obj)
    expected_types = [type(t) for t in _tensors(obj)]
    assert [type(t) for t in _tensors(doubled)] == expected_types
    assert (
        doubled["boxes"].format == obj["boxes"].format and doubled["boxes"].clamping_mode == obj["boxes"].clamping_mode
    )
    assert doubled["keypoints"].canvas_size == obj["keypoints"].canvas_size
    assert torch.equal(doubled["sample"]["labels"], obj["sample"]["labels"] * 2)


def _tensors(obj):
    from tensor_codec.tree import iter_leaves

    return [x for _, x in iter_leaves(obj) if isinstance(x, torch.Tensor)]


def test_pin_memory_walks_the_structure_and_rewraps_on_cpu(monkeypatch):
    """The structure walk of tc.pin_memory, on a machine without a GPU: only the leaf operation
    (torch's pin_memory, which needs CUDA) is replaced, by one that returns a plain copy, the way
    a DataLoader's pinning step loses the subclass."""
    calls = []

    def fake_pin(self):
        calls.append(type(self))
        return torch.Tensor.clone(self).as_subclass(torch.Tensor)

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    obj = {"sample": make_detection_sample(), "packed": tc.decode(*tc.encode(CASES["video"]))}
    pinned = tc.pin_memory(obj)
    assert_identical(pinned, obj)
    assert len(calls) == len(_tensors(obj)) and all(c is torch.Tensor for c in calls)


def test_pin_memory_without_cuda_is_a_clear_usage_error(monkeypatch):
    """Not torch's "Found no NVIDIA driver" from deep inside: what is missing and what to do."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        tc.UsageError,
        match=r"tc.pin_memory: expected a usable CUDA device .* call it only when torch.cuda.is_available\(\)",
    ):
        tc.pin_memory({"x": torch.ones(2)})


@pytest.mark.gpu
def test_pin_memory_pins_every_part_and_keeps_tvtensor_types():
    obj = {"sample": make_detection_sample(), "boxes": CASES["boxes_xyxy"], "keypoints": CASES["keypoints"]}
    pinned = tc.pin_memory(obj)
    assert_identical(pinned, obj)
    assert all(t.is_pinned() for t in _tensors(pinned))
    restored = tc.decode(*tc.encode(pinned))
    assert_identical(restored, obj)


@pytest.mark.gpu
def test_tvtensors_from_the_gpu_arrive_with_attributes():
    boxes = tvt.BoundingBoxes(torch.rand(5, 4, device="cuda"), format="XYWH", canvas_size=(20, 30))
    restored = tc.decode(*tc.encode({"b": boxes}))
    assert type(restored["b"]) is tvt.BoundingBoxes and restored["b"].canvas_size == (20, 30)
    assert torch.equal(restored["b"].as_subclass(torch.Tensor), boxes.cpu().as_subclass(torch.Tensor))
