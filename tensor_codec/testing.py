"""Sample objects and a strict comparison, shared by the tests, the demo nodes and the benchmarks:
`make_suite()`, every case (the layouts that broke senders, one tensor per dtype, every TVTensor
class and attribute, PackedSequences, nested samples), deterministic for a seed so a receiver can
rebuild what a sender sent; `assert_identical`, which compares all that the wire format keeps.
"""

from __future__ import annotations

import collections
import math
from typing import Any

import torch
from torch.nn.utils.rnn import PackedSequence, pack_sequence

from .errors import format_path
from .layout import plan_leaf, values_of
from .walk import fold, plain_of
from .wire.dtypes import supported_torch_dtypes
from .wire.kinds import TV_ATTRIBUTES
from .wire.structure import DICT, LIST, NAMEDTUPLE, PACKED, TUPLE

__all__ = [
    "make_layout_cases",
    "make_dtype_cases",
    "make_tvtensor_cases",
    "make_packed_sequences",
    "make_detection_sample",
    "make_many_small",
    "make_suite",
    "assert_identical",
    "expected_wire_strides",
    "tensor_bytes",
]

Point = collections.namedtuple("Point", ["x", "y"])


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make_layout_cases(seed: int = 0) -> dict[str, torch.Tensor]:
    g = _gen(seed)
    base = torch.arange(100, dtype=torch.float32).reshape(10, 10)
    complex_base = torch.randn(3, 4, dtype=torch.complex64, generator=g)
    return {
        # failure mode 1: two 2x3 tensors 0..5 and 6..11 stacked into 2x2x3
        "stacked": torch.stack([torch.arange(6.0).reshape(2, 3), torch.arange(6.0, 12.0).reshape(2, 3)]),
        "row_slice_with_offset": torch.arange(100, dtype=torch.int32)[40:60],
        "sliced_with_offset": base[3:7, 2:],
        "transposed": torch.arange(24, dtype=torch.int64).reshape(4, 6).t(),
        "permuted_3d": torch.randn(2, 3, 4, generator=g).permute(2, 0, 1),
        "expanded": torch.arange(3.0).expand(4, 3),
        "expanded_middle": torch.arange(6.0).reshape(2, 1, 3).expand(2, 5, 3),
        "expanded_and_cropped": base[::2, 1].unsqueeze(0).expand(3, 5),
        "channels_last": torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last),
        "strided_crop": torch.randn(8, 16, generator=g)[1::2, 3::3],
        "overlapping_window": torch.arange(10.0).as_strided((8, 3), (1, 1)),
        "zero_dim": torch.tensor(3.5),
        "zero_size": torch.zeros(0, 4),
        "zero_size_transposed": torch.zeros(3, 0, 2).transpose(0, 2),
        "requires_grad": torch.randn(3, 4, generator=g).requires_grad_(),
        "conjugated": complex_base.conj(),
        "negative_bit": torch.randn(3, 4, dtype=torch.complex64, generator=g).conj().imag,
        "single_element_odd_strides": torch.randn(1, 1, 1, generator=g).as_strided((1, 1, 1), (7, 3, 11)),
    }


def make_dtype_cases(seed: int = 0, shape: tuple[int, ...] = (3, 5)) -> dict[str, torch.Tensor]:
    """One tensor per supported dtype, from random bytes (NaNs and all), bools as 0/1."""
    g = _gen(seed)
    out = {}
    numel = math.prod(shape)
    for dtype in supported_torch_dtypes():
        raw = torch.randint(0, 256, (numel * dtype.itemsize,), dtype=torch.uint8, generator=g)
        if dtype == torch.bool:
            raw = raw % 2
        out[str(dtype).removeprefix("torch.")] = raw.view(dtype).reshape(shape)
    return out


def _tv_tensors() -> Any:
    """torchvision.tv_tensors, or None without it: imported when a sample needs it (~1.3 s: kinds.py)."""
    try:
        from torchvision import tv_tensors
    except ImportError:  # pragma: no cover
        return None
    return tv_tensors


def make_tvtensor_cases(seed: int = 0) -> dict[str, Any]:
    tvt = _tv_tensors()
    if tvt is None:
        return {}
    g = _gen(seed)
    cases: dict[str, Any] = {
        "image": tvt.Image(torch.randint(0, 256, (3, 8, 10), dtype=torch.uint8, generator=g)),
        "image_float_channels_last": tvt.Image(
            torch.rand(1, 3, 6, 7, generator=g).to(memory_format=torch.channels_last)
        ),
        "video": tvt.Video(torch.randint(0, 256, (4, 3, 6, 6), dtype=torch.uint8, generator=g)),
        "mask": tvt.Mask(torch.randint(0, 2, (2, 8, 10), dtype=torch.uint8, generator=g).bool()),
    }
    columns = {"XYWHR": 5, "CXCYWHR": 5, "XYXYXYXY": 8}
    clamping = ["soft", "hard", None]
    for i, fmt in enumerate(tvt.BoundingBoxFormat):
        cols = columns.get(fmt.name, 4)
        kwargs = {"format": fmt, "canvas_size": (48 + i, 64 + i), "clamping_mode": clamping[i % 3]}
        cases[f"boxes_{fmt.name.lower()}"] = tvt.BoundingBoxes(torch.rand(5, cols, generator=g) * 40, **kwargs)
    cases["boxes_batched_view"] = cases["boxes_xyxy"][None]  # 3-D: only reachable through ops
    cases["keypoints"] = tvt.KeyPoints(torch.rand(6, 2, generator=g) * 30, canvas_size=(31, 33))
    return cases


def make_packed_sequences(seed: int = 0) -> dict[str, PackedSequence]:
    g = _gen(seed)
    seqs = [torch.randn(n, 3, generator=g) for n in (2, 5, 3)]
    return {
        "packed_unsorted": pack_sequence(seqs, enforce_sorted=False),
        "packed_sorted": pack_sequence(sorted(seqs, key=len, reverse=True), enforce_sorted=True),
    }


def make_detection_sample(seed: int = 0, height: int = 48, width: int = 64) -> dict[str, Any]:
    tvt = _tv_tensors()
    g = _gen(seed)
    image = torch.randint(0, 256, (3, height, width), dtype=torch.uint8, generator=g)
    boxes = torch.rand(7, 4, generator=g) * min(height, width) / 2
    boxes[:, 2:] += boxes[:, :2]
    return {
        "image": tvt.Image(image) if tvt else image,
        "boxes": tvt.BoundingBoxes(boxes, format="XYXY", canvas_size=(height, width)) if tvt else boxes,
        "labels": torch.randint(0, 80, (7,), generator=g),
        "meta": {
            "frame": 17,
            "source": "camera/front",
            "score": 0.25,
            "flags": [True, False],
            "note": None,
            3: "int key",
        },
        "corner": Point(1, -2),
        "pair": (torch.arange(3), "tag"),
    }


def make_many_small(count: int = 200, seed: int = 0) -> list[torch.Tensor]:
    """Small tensors allocated back to back: the caching-allocator case of failure mode 1."""
    return [torch.full((i % 5 + 1,), float(i)) for i in range(count)]


def make_suite(seed: int = 0) -> dict[str, Any]:
    """Every case, one message each, by name."""
    suite: dict[str, Any] = {}
    suite.update({f"layout/{k}": v for k, v in make_layout_cases(seed).items()})
    suite.update({f"dtype/{k}": v for k, v in make_dtype_cases(seed).items()})
    suite.update({f"tv/{k}": v for k, v in make_tvtensor_cases(seed).items()})
    suite.update({f"packed/{k}": v for k, v in make_packed_sequences(seed).items()})
    suite["nested/detection"] = make_detection_sample(seed)
    suite["nested/many_small"] = make_many_small(seed=seed)
    suite["nested/empty_dict"] = {}
    return suite


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The logical values' raw bytes in row-major order (bit-exact comparison, NaNs included)."""
    values = values_of(plain_of(t), ())  # detached, the lazy conj / neg bits resolved
    if values.numel() == 0:
        return b""
    fresh = torch.empty(values.shape, dtype=values.dtype)  # row-major strides, even for size-1 dims
    fresh.copy_(values)
    return fresh.reshape(-1).view(torch.uint8).numpy().tobytes()


def expected_wire_strides(t: torch.Tensor) -> tuple[int, ...]:
    """The strides a receiver gets for `t` (its own where the layout is dense, else compacted)."""
    return plan_leaf(plain_of(t), ()).strides


def assert_identical(actual: Any, expected: Any, *, strides: str = "wire") -> None:
    """Raise AssertionError naming the path of the first difference (``$.boxes[2]``).

    strides: "wire" (as the wire format promises), "exact" (same as `expected`) or "ignore".
    `expected` is walked by the codec's walker (walk.fold: the types `encode` accepts); each
    container of `actual` is checked against it before its children are compared.
    """
    counterparts = {(): actual}  # path -> the part of `actual` found there

    def on_enter(e: Any, tag: str, parts: tuple) -> None:
        a = counterparts.pop(parts)
        te, ta = type(e), type(a)
        if tag is NAMEDTUPLE:  # a received namedtuple may be a generated class: same name and fields
            assert issubclass(ta, tuple) and getattr(ta, "_fields", None) == te._fields, (
                f"{format_path(parts)}: expected namedtuple {te.__name__}{te._fields}, got {ta.__name__}"
            )
            assert ta.__name__ == te.__name__, (
                f"{format_path(parts)}: expected namedtuple named {te.__name__}, got {ta.__name__}"
            )
        else:
            assert ta is te, f"{format_path(parts)}: expected type {te.__name__}, got {ta.__name__}"
        if tag is DICT:
            assert list(a) == list(e), f"{format_path(parts)}: expected keys {list(e)}, got {list(a)}"
        elif tag is LIST or tag is TUPLE:
            assert len(a) == len(e), f"{format_path(parts)}: expected length {len(e)}, got {len(a)}"
        if tag is NAMEDTUPLE or tag is PACKED:  # by field name, in the order walk.fold visits them
            counterparts.update({parts + (name,): getattr(a, name) for name in te._fields})
        else:
            counterparts.update({parts + (key,): a[key] for key in (e if tag is DICT else range(len(e)))})

    def on_tensor(e: torch.Tensor, kind: Any, parts: tuple) -> None:
        a = counterparts.pop(parts)
        assert type(a) is type(e), f"{format_path(parts)}: expected type {type(e).__name__}, got {type(a).__name__}"
        _assert_tensor(a, e, strides, format_path(parts))

    def on_scalar(e: Any, parts: tuple) -> None:
        a = counterparts.pop(parts)
        assert type(a) is type(e), f"{format_path(parts)}: expected type {type(e).__name__}, got {type(a).__name__}"
        if type(e) is float:
            same = (math.isnan(a) and math.isnan(e)) or (a == e and math.copysign(1, a) == math.copysign(1, e))
            assert same, f"{format_path(parts)}: expected {e!r}, got {a!r}"
        else:
            assert a == e, f"{format_path(parts)}: expected {e!r}, got {a!r}"

    fold(expected, on_tensor, on_scalar, None, on_enter)


def _assert_tensor(actual: torch.Tensor, expected: torch.Tensor, strides: str, path: str) -> None:
    assert actual.dtype == expected.dtype, f"{path}: expected dtype {expected.dtype}, got {actual.dtype}"
    assert actual.shape == expected.shape, f"{path}: expected shape {tuple(expected.shape)}, got {tuple(actual.shape)}"
    assert actual.requires_grad == expected.requires_grad, (
        f"{path}: expected requires_grad={expected.requires_grad}, got {actual.requires_grad}"
    )
    if strides != "ignore":
        want = expected_wire_strides(expected) if strides == "wire" else expected.stride()
        assert actual.stride() == want, f"{path}: expected strides {want}, got {actual.stride()}"
    for attr in TV_ATTRIBUTES:
        if hasattr(expected, attr):
            want, got = getattr(expected, attr), getattr(actual, attr, "<missing>")
            assert got == want and type(got) is type(want), f"{path}.{attr}: expected {want!r}, got {got!r}"
    assert tensor_bytes(actual) == tensor_bytes(expected), f"{path}: values differ (bit-exact comparison)"
