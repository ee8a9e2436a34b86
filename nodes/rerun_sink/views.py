"""What each thing a message holds is shown as in rerun: its meaning, not only its numbers.

    tv_tensors.Image (..., C, H, W)    Image (HWC: a view of channels-last memory, no copy; planar
                                       memory is interleaved once, as rerun has no planar RGB)
    tv_tensors.Video (..., T, C, H, W) one Image per frame, on the `video_frame` timeline
    tv_tensors.Mask                    SegmentationImage: (H, W) class ids as they are; (N, H, W)
                                       binary instance masks as one image of instance ids 1..N
    tv_tensors.BoundingBoxes           Boxes2D (XYXY, XYWH, CXCYWH) or closed LineStrips2D (the
                                       rotated formats), in pixels of their canvas, whose outline
                                       is drawn under `canvas` so the view spans the whole canvas
    tv_tensors.KeyPoints (..., 2)      Points2D, one class id per instance, and the canvas outline
    JPEG bytes                         EncodedImage: the viewer decodes them, this node never does
    a one-element tensor, a number     Scalars: plotted over time
    any other tensor                   Tensor
    a string                           TextDocument

`views(obj, hint)` returns `View`s: where under the message's entity path each goes, and what.
Everything here is read-only over the message; nothing is decoded that the viewer can decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import rerun as rr
import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as F

from tensor_codec.errors import format_path
from tensor_codec.tree import iter_leaves

__all__ = ["View", "CannotShow", "views", "plain_image_view", "jpeg_view", "entity_path", "COLOR_MODELS"]

# dora's image encodings, and tensor_codec frames' `pixel_format`, as rerun's colour models.
COLOR_MODELS = {"rgb8": "RGB", "bgr8": "BGR", "mono8": "L"}
_CHANNEL_MODELS = {1: "L", 3: "RGB", 4: "RGBA"}
_AXIS_ALIGNED = {"XYXY", "XYWH", "CXCYWH"}
_COLUMNS = {"XYXY": 4, "XYWH": 4, "CXCYWH": 4, "XYWHR": 5, "CXCYWHR": 5, "XYXYXYXY": 8}
VIDEO_TIMELINE = "video_frame"


class CannotShow(ValueError):
    """A leaf this sink cannot show: the message names the leaf's path, what was expected and
    what came."""


@dataclass(frozen=True)
class View:
    """One thing to log: `parts` under the message's entity path, and on `timeline` (name,
    index) besides the message's own times, when set."""

    parts: tuple[str, ...]
    archetype: Any
    timeline: tuple[str, int] | None = None


def entity_path(root: str, parts: tuple[str, ...]) -> str:
    return rr.new_entity_path([root, *parts])


def _parts(path: tuple) -> tuple[str, ...]:
    """A structure path as entity path parts: ("boxes", 2) -> ("boxes", "[2]"), as `$.boxes[2]`."""
    return tuple(f"[{p}]" if isinstance(p, int) else str(p) for p in path)


def views(obj: Any, hint: str | None = None) -> tuple[list[View], list[str]]:
    """Everything `obj` (a decoded message: a tensor, TVTensor or nested structure) shows as,
    -> (views, problems): a leaf that cannot be shown is a problem naming its path; the others
    are still shown. `hint` is the message's pixel_format (rgb8, bgr8, mono8) for an image."""
    out: list[View] = []
    problems: list[str] = []
    for path, leaf in iter_leaves(obj):
        try:
            for view in leaf_views(leaf, format_path(path), hint):
                out.append(View(_parts(path) + view.parts, view.archetype, view.timeline))
        except CannotShow as e:
            problems.append(str(e))
        except Exception as e:  # what torch or rerun refused, past the checks: this leaf only, named
            problems.append(f"{format_path(path)}: not shown ({type(e).__name__}: {str(e)[:200]})")
    return out, problems


def leaf_views(leaf: Any, where: str, hint: str | None = None) -> list[View]:
    if leaf is None:
        return []
    if isinstance(leaf, (bool, int, float)):
        return [View((), rr.Scalars(float(leaf)))]
    if isinstance(leaf, str):
        return [View((), rr.TextDocument(leaf))]
    if isinstance(leaf, tv_tensors.Image):
        return image_views(_host(leaf), where, COLOR_MODELS.get(hint or ""))
    if isinstance(leaf, tv_tensors.Video):
        return video_views(_host(leaf), where)
    if isinstance(leaf, tv_tensors.Mask):
        return mask_views(_host(leaf), where)
    if isinstance(leaf, tv_tensors.BoundingBoxes):
        return box_views(_host(leaf), leaf.format.name, tuple(leaf.canvas_size), where)
    key_points = getattr(tv_tensors, "KeyPoints", None)  # torchvision >= 0.23
    if key_points is not None and isinstance(leaf, key_points):
        return keypoint_views(_host(leaf), tuple(leaf.canvas_size), where)
    return tensor_views(_host(leaf), where)


# ------------------------------------------------------------------------------ tensors to numpy
def _host(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor on the CPU (a CUDA IPC leaf is copied out; a host one stays a view)."""
    plain = t.as_subclass(torch.Tensor)
    if plain.device.type != "cpu":
        plain = plain.cpu()
    return plain


def _numpy(t: torch.Tensor, where: str) -> np.ndarray:
    """`t` as numpy in a dtype rerun takes (a view when it is one already)."""
    if t.is_quantized:
        t = t.dequantize()
    t = t.resolve_conj().resolve_neg()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    elif t.dtype.is_floating_point and t.dtype not in (torch.float16, torch.float32, torch.float64):
        try:
            t = t.to(torch.float32)  # bfloat16, float8: rerun has no such channel types
        except (NotImplementedError, RuntimeError):  # packed float4 has no conversion: its bytes, as they are
            t = t.contiguous().view(torch.uint8) if t.element_size() == 1 else t
    try:
        return t.detach().numpy()
    except (TypeError, RuntimeError) as e:
        raise CannotShow(f"{where}: expected a tensor numpy can view, got {t.dtype} ({e})") from None


def _check_dims(t: torch.Tensor, minimum: int, what: str, where: str) -> None:
    if t.dim() < minimum:
        raise CannotShow(f"{where}: expected {what}, got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise CannotShow(f"{where}: expected {what} with data, got shape {tuple(t.shape)}")


# ------------------------------------------------------------------------------------- images
def _image(chw: torch.Tensor, where: str, model: str | None) -> Any:
    """One (C, H, W) image as rr.Image; C=1 is (H, W), else the HWC view (no copy when the
    tensor is channels-last; rerun interleaves planar memory). `model` (from the message's
    pixel_format) is taken where it fits the channels: BGR for a 3-channel frame."""
    channels = chw.shape[0]
    if chw.dtype == torch.bool:
        chw = chw.to(torch.uint8) * 255
    hwc = chw[0] if channels == 1 else chw.permute(1, 2, 0)
    if not (model == "BGR" and channels == 3):
        model = _CHANNEL_MODELS[channels]
    return rr.Image(_numpy(hwc, where), color_model=model)


def image_views(t: torch.Tensor, where: str, model: str | None = None) -> list[View]:
    _check_dims(t, 3, "an image of shape (..., C, H, W)", where)
    channels, height, width = t.shape[-3:]
    if channels not in _CHANNEL_MODELS:  # e.g. a feature map: numbers, not colours
        return tensor_views(t, where, ("C", "H", "W"))
    batch = t.reshape(-1, channels, height, width)
    if batch.shape[0] == 1:
        return [View((), _image(batch[0], where, model))]
    return [View((f"[{i}]",), _image(one, f"{where}[{i}]", model)) for i, one in enumerate(batch)]


def video_views(t: torch.Tensor, where: str) -> list[View]:
    _check_dims(t, 4, "a video of shape (..., T, C, H, W)", where)
    channels, height, width = t.shape[-3:]
    if channels not in _CHANNEL_MODELS:
        return tensor_views(t, where, ("T", "C", "H", "W"))
    frames = t.reshape(-1, channels, height, width)
    return [View((), _image(frame, f"{where}[{i}]", None), (VIDEO_TIMELINE, i)) for i, frame in enumerate(frames)]


def plain_image_view(flat: torch.Tensor, encoding: str, width: int, height: int) -> View:
    """A dora image message (flat rgb8 / bgr8 / mono8 bytes, already checked against width and
    height) as rr.Image over the message's own bytes: HWC is how they lie, so nothing is copied."""
    channels = 1 if encoding == "mono8" else 3
    shape = (height, width) if channels == 1 else (height, width, channels)
    return View((), rr.Image(flat.numpy().reshape(shape), color_model=COLOR_MODELS[encoding]))


def jpeg_view(data: torch.Tensor) -> View:
    """JPEG bytes (markers and header already checked) as an EncodedImage: not decoded here."""
    return View((), rr.EncodedImage(contents=data.numpy(), media_type="image/jpeg"))


# -------------------------------------------------------------------------------------- masks
def _class_ids(labels: torch.Tensor, where: str) -> np.ndarray:
    """Mask values as SegmentationImage's class ids: integers >= 0 (booleans as 0 and 1)."""
    if labels.dtype.is_floating_point or labels.is_complex():
        raise CannotShow(f"{where}: expected integer or boolean mask values (class ids), got {labels.dtype}")
    if labels.dtype.is_signed and labels.numel() and int(labels.min()) < 0:
        raise CannotShow(f"{where}: expected class ids >= 0, got {int(labels.min())}")
    return _numpy(labels, where)


def mask_views(t: torch.Tensor, where: str) -> list[View]:
    _check_dims(t, 2, "a mask of shape (H, W) or (N, H, W)", where)
    masks = t.reshape(-1, *t.shape[-2:])
    if t.dtype.is_floating_point:  # soft masks (probabilities): grey levels, not ids
        shown = [rr.Image(_numpy(m, where), color_model="L") for m in masks]
    elif masks.shape[0] == 1:  # (H, W) class ids, as they are
        shown = [rr.SegmentationImage(_class_ids(masks[0], where))]
    elif t.dtype == torch.bool or (int(masks.min()) >= 0 and int(masks.max()) <= 1):
        # binary instance masks: one image, pixel = 1 + index of the last mask covering it, 0 = none
        ids = torch.arange(1, masks.shape[0] + 1, dtype=torch.int32).view(-1, 1, 1)
        labels = (masks != 0).to(torch.int32).mul_(ids).amax(dim=0)
        narrow = torch.uint8 if masks.shape[0] < 256 else torch.int32
        shown = [rr.SegmentationImage(_class_ids(labels.to(narrow), where))]
    else:  # several label maps
        shown = [rr.SegmentationImage(_class_ids(m, f"{where}[{i}]")) for i, m in enumerate(masks)]
    if len(shown) == 1:
        return [View((), shown[0])]
    return [View((f"[{i}]",), archetype) for i, archetype in enumerate(shown)]


# ------------------------------------------------------------------------- boxes and keypoints
def canvas_outline(canvas_size: tuple[int, int]) -> View:
    """The canvas (height, width) as a grey rectangle, so a view of boxes or points spans it."""
    height, width = canvas_size
    corners = [[0, 0], [width, 0], [width, height], [0, height], [0, 0]]
    return View(("canvas",), rr.LineStrips2D([corners], colors=[[128, 128, 128]]))


def box_corners(t: torch.Tensor, box_format: str, where: str) -> torch.Tensor:
    """(N, 4) XYXY for the axis-aligned formats, (N, 4, 2) corners for the rotated ones; float64."""
    columns = _COLUMNS.get(box_format)
    if columns is None:
        raise CannotShow(f"{where}.format: expected one of {', '.join(_COLUMNS)}, got {box_format!r}")
    if t.dim() == 0 or t.shape[-1] != columns:
        raise CannotShow(
            f"{where}: expected boxes of shape (N, {columns}) in format {box_format}, got {tuple(t.shape)}"
        )
    if t.is_complex():
        raise CannotShow(f"{where}: expected real box coordinates, got {t.dtype}")
    boxes = t.reshape(-1, columns).to(torch.float64)
    old = tv_tensors.BoundingBoxFormat[box_format]
    if box_format in _AXIS_ALIGNED:
        return F.convert_bounding_box_format(
            boxes, old_format=old, new_format=tv_tensors.BoundingBoxFormat.XYXY, inplace=False
        )
    corners = F.convert_bounding_box_format(
        boxes, old_format=old, new_format=tv_tensors.BoundingBoxFormat.XYXYXYXY, inplace=False
    )
    return corners.view(-1, 4, 2)


def box_views(t: torch.Tensor, box_format: str, canvas_size: tuple[int, int], where: str) -> list[View]:
    corners = box_corners(t, box_format, where)
    if box_format in _AXIS_ALIGNED:
        shape = rr.Boxes2D(array=corners.numpy(), array_format=rr.Box2DFormat.XYXY)
    else:  # rerun's boxes are axis-aligned: a rotated box is its closed outline
        shape = rr.LineStrips2D(torch.cat([corners, corners[:, :1]], dim=1).numpy())
    return [View((), shape), canvas_outline(canvas_size)]


def keypoint_views(t: torch.Tensor, canvas_size: tuple[int, int], where: str) -> list[View]:
    if t.dim() == 0 or t.shape[-1] != 2:
        raise CannotShow(f"{where}: expected key points of shape (..., 2), got {tuple(t.shape)}")
    if t.is_complex():
        raise CannotShow(f"{where}: expected real coordinates, got {t.dtype}")
    points = t.reshape(-1, 2).to(torch.float64)
    per_instance = t.shape[-2] if t.dim() >= 3 else 1
    instance = (
        np.repeat(np.arange(points.shape[0] // per_instance), per_instance)
        if points.shape[0]
        else np.zeros(0, np.int64)
    )
    return [View((), rr.Points2D(points.numpy(), class_ids=instance)), canvas_outline(canvas_size)]


# ------------------------------------------------------------------------------- other tensors
def tensor_views(t: torch.Tensor, where: str, dim_names: tuple[str, ...] | None = None) -> list[View]:
    if t.numel() == 1 and t.dim() <= 1:
        value = t.reshape(()).resolve_conj().resolve_neg()
        if value.is_complex():
            return [View((), rr.Scalars([float(value.real), float(value.imag)]))]
        return [View((), rr.Scalars(float(value.dequantize() if value.is_quantized else value)))]
    if t.numel() == 0:
        return [View((), rr.TextDocument(f"empty tensor: shape {tuple(t.shape)}, {t.dtype}"))]
    array = _numpy(t, where)
    names = list(dim_names) if dim_names is not None and len(dim_names) == array.ndim else None
    return [View((), rr.Tensor(array, dim_names=names))]
