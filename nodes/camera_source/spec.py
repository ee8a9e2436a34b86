"""The camera source's interface, as its manifest shows it."""

from ..common.delivery import ack_inputs_port
from ..common.manifest import NodeSpec, Port
from .config import OUTPUT, SETTINGS, TICK_INPUT

SPEC = NodeSpec(
    name="tc-camera-source",
    description=(
        "Frames as torchvision tv_tensors.Image (uint8, CHW) through tensor_codec, on CPU or CUDA: a synthetic "
        "test pattern that carries its own frame index (default, no hardware), a V4L2/USB camera, a video file "
        "or a folder of images. FORMAT=raw sends flat rgb8 for dora-hub image nodes instead."
    ),
    inputs=(
        Port(
            TICK_INPUT,
            "Optional. When wired (e.g. dora/timer/millis/33), one frame per tick instead of pacing at FPS.",
            optional=True,
        ),
        ack_inputs_port(OUTPUT),
    ),
    outputs=(
        Port(
            OUTPUT,
            "One frame per message: a tensor_codec message (FORMAT=codec) or flat HWC bytes (FORMAT=raw).",
            {
                "encoding": (
                    "FORMAT=raw only: rgb8 (3 channels) or mono8 (1 channel), dora's image convention: the value is "
                    "exactly height x width x channels interleaved bytes, what dora-hub image nodes read"
                ),
                "width": "FORMAT=raw only: frame width in px",
                "height": "FORMAT=raw only: frame height in px",
                "pixel_format": (
                    "FORMAT=codec only: rgb8 or mono8. A tensor_codec message never carries encoding/width/height: "
                    "hub image nodes would read its planar bytes as interleaved pixels (the frame's size is the "
                    "tensor's shape)"
                ),
                "frame": "frame index, 0, 1, 2, ...",
                "capture_ns": "wall clock (ns since the epoch) when the frame was captured or rendered",
                "sent_ns": "wall clock (ns) just before sending",
                "seq": "same as frame: per-stream sequence number",
                "count": "FRAMES (0 = open-ended)",
                "stream": "id of this run of the node",
                "wants_ack": (
                    "true when `ack*` inputs are wired: the consumer acknowledges seq and stream on its `ack` output"
                ),
                "pattern": "tc-synthetic-v2 on synthetic frames: the pixels carry `frame` and can be rebuilt exactly",
                "pattern_size": (
                    "WIDTHxHEIGHT the pattern was rendered at (a receiver tells a frame cropped upstream by it)"
                ),
                "tc.*": "tensor_codec's own keys (FORMAT=codec only)",
            },
        ),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: camera
    path: tc-camera-source
    shared_memory_pool_size: 64MB  # room for a few frames in flight
    outputs: [image]
    env:
      WIDTH: "1280"
      HEIGHT: "720"
      FPS: "30"
  - id: receiver
    path: tc-tensor-receiver
    inputs:
      frames: {source: camera/image, queue_size: 64}
""",
)
