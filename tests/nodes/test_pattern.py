"""The synthetic pattern: deterministic, carries its index, survives JPEG at quality 75."""

from __future__ import annotations

import pytest
import torch

from tensor_codec_nodes.common.pattern import check_size, read_index, render
from tests.support.jpeg import reference_decode, reference_encode

SIZES = [(56, 64), (240, 320), (480, 640), (1080, 1920)]
INDICES = [0, 1, 77, 65535, 2**31 + 5, 2**32 - 1]


@pytest.mark.parametrize("height, width", SIZES)
@pytest.mark.parametrize("channels", [3, 1])
def test_frames_carry_their_index(height, width, channels):
    for index in INDICES:
        frame = render(index, height, width, channels=channels)
        assert frame.shape == (channels, height, width) and frame.dtype == torch.uint8
        assert read_index(frame) == index


def test_rendering_is_deterministic_and_frames_differ():
    a, b = render(10, 120, 160), render(10, 120, 160)
    assert torch.equal(a, b)
    assert not torch.equal(render(10, 120, 160), render(11, 120, 160))


@pytest.mark.parametrize("height, width", [(240, 320), (1080, 1920), (2160, 3840)])
@pytest.mark.parametrize("channels", [3, 1])
def test_the_index_survives_jpeg_quality_75(height, width, channels):
    for index in (3, 123456789, 2**32 - 2):
        frame = render(index, height, width, channels=channels)
        restored = reference_decode(reference_encode(frame, quality=75), channels=None)  # mono stays mono
        assert restored.shape == frame.shape and read_index(restored) == index


def test_a_damaged_strip_does_not_decode_to_a_wrong_index():
    frame = render(1234, 240, 320)
    frame[:, :16, :16] = 255 - frame[:, :16, :16]  # flip the first cell
    assert read_index(frame) is None


def test_too_small_frames_and_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="frame size: expected at least 64 px wide"):
        check_size(100, 32)
    with pytest.raises(ValueError, match="index: expected 0 <= index < 2\\*\\*32"):
        render(-1, 240, 320)
    with pytest.raises(ValueError, match="channels: expected 1 or 3, got 2"):
        render(0, 240, 320, channels=2)
    assert read_index(torch.zeros(3, 20, 20, dtype=torch.uint8)) is None
    assert read_index(torch.zeros(4, 240, 320, dtype=torch.uint8)) is None


@pytest.mark.gpu
def test_cuda_renders_the_same_bytes_as_the_cpu():
    for index in INDICES:
        on_gpu = render(index, 1080, 1920, device="cuda")
        assert on_gpu.is_cuda and torch.equal(on_gpu.cpu(), render(index, 1080, 1920))
        assert read_index(on_gpu) == index


def test_hwc_frames_hold_the_same_values_interleaved():
    chw, hwc = render(9, 120, 160), render(9, 120, 160, hwc=True)
    assert torch.equal(chw, hwc) and hwc.permute(1, 2, 0).is_contiguous() and read_index(hwc) == 9


def test_same_pixels_is_torch_equal_for_any_layouts():
    from tensor_codec_nodes.common.pattern import same_pixels

    a, b = render(2, 120, 160), render(2, 120, 160, hwc=True)
    assert same_pixels(a, a.clone()) and same_pixels(b, b.clone()) and same_pixels(a, b)
    for frame in (a.clone(), b.clone()):
        frame[1, 60, 80] ^= 1
        assert not same_pixels(frame, a) and not same_pixels(a, frame)
    assert not same_pixels(a, a[:, :, :-1]) and not same_pixels(a, a.float())
    odd = render(2, 57, 65)
    assert same_pixels(odd, odd.clone())  # not a multiple of 8 bytes: byte comparison


def test_same_pixels_falls_back_for_unaligned_offsets_and_floats():
    from tensor_codec_nodes.common.pattern import same_pixels

    frame = render(3, 120, 160, hwc=True)
    flat = torch.zeros(frame.numel() + 3, dtype=torch.uint8)
    flat[3:] = frame.permute(1, 2, 0).reshape(-1)
    shifted = flat[3:].view(120, 160, 3).permute(2, 0, 1)  # storage offset 3
    assert same_pixels(shifted, frame) and same_pixels(frame, shifted)
    nan = torch.full((2, 4), float("nan"))
    assert same_pixels(nan, nan.clone()) == torch.equal(nan, nan.clone())
    zeros = torch.zeros(2, 4)
    assert same_pixels(zeros, -zeros) == torch.equal(zeros, -zeros)
