"""The camera source's interface, as its manifest shows it."""

from ..common.manifest import NodeSpec, Port
from .config import OUTPUT, SETTINGS, TICK_INPUT

SPEC = NodeSpec(
    name="tc-camera-source",
    description=(
        "Frames as torchvision tv_tensors.Image (uint8, CHW) through tensor_codec, on CPU or CUDA: a synthetic "
        "test pattern that carries its own frame index (default, no hardware), a V4L2/USB camera, a video file "
        "or a folder of images. FORMAT=raw sends flat rgb8 for dora's own image nodes instead."
    ),
    inputs=(
        Port(TICK_INPUT, "Optional. When wired (e.g. dora/timer/millis/33), one frame per tick instead of pacing at FPS.", optional=True),
        Port(
            "ack*",
            "Optional. Acknowledged delivery: one input per consumer of `image` whose id starts with `ack` (`ack_encoder`, "
            "`ack_receiver`, ...), wired to that consumer's `ack` output. A frame counts as delivered when every one of them "
            "acknowledged it; at most WINDOW frames are unacknowledged (a slow consumer slows the camera down instead of "
            "losing frames), one unacknowledged for RETRY_S is resent, and one past ACK_TIMEOUT_S is given up and makes the "
            "node exit with status 1, logging how many frames were not acknowledged.",
            optional=True,
        ),
    ),
    outputs=(
        Port(
            OUTPUT,
            "One frame per message: a tensor_codec message (FORMAT=codec) or flat HWC bytes (FORMAT=raw).",
            {
                "encoding": "rgb8 (3 channels) or mono8 (1 channel): the pixel format, as dora's image nodes name it. With FORMAT=codec the value is a tensor_codec message (tc.* keys), not flat bytes: wire dora's plot/record nodes to FORMAT=raw",
                "width": "frame width in px",
                "height": "frame height in px",
                "frame": "frame index, 0, 1, 2, ...",
                "capture_ns": "wall clock (ns since the epoch) when the frame was captured or rendered",
                "sent_ns": "wall clock (ns) just before sending",
                "seq": "same as frame: per-stream sequence number",
                "count": "FRAMES (0 = open-ended)",
                "stream": "id of this run of the node",
                "wants_ack": "true when `ack*` inputs are wired: the consumer acknowledges seq and stream on its `ack` output",
                "pattern": "tc-synthetic-v2 on synthetic frames: the pixels carry `frame` and can be rebuilt exactly",
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
