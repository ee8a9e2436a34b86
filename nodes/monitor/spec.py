"""The monitor's interface, as its manifest shows it."""

from ..common.manifest import NodeSpec, Port
from .config import SETTINGS

SPEC = NodeSpec(
    name="tc-monitor",
    description=(
        "Shows what flows, like `ros2 topic hz/bw/echo`: put it on any outputs, and every PERIOD_S it prints one line "
        "per input with the message rate, the bandwidth (the Arrow value's bytes; for CUDA IPC the GPU bytes a "
        "message refers to, which never travel), the latency from the sender's sent_ns, the transport, and what the "
        "last message is: for tensor_codec messages the object's structure from the codec's header, without decoding "
        "(types, dict keys, dtypes, shapes, TVTensor attributes, the GPU for CUDA IPC); for dora images the encoding "
        "and size; for any other Arrow value its type and length. At the end, a summary table per input. Nothing is "
        "copied: a CUDA IPC message's slot is claimed and released at once (its producer need not wait for the "
        "monitor), its GPU memory never mapped. A malformed message is logged (paced), counted as bad and skipped; "
        "the node never acknowledges, so it slows no sender down."
    ),
    inputs=(
        Port(
            "<any id>",
            "Any number of inputs, each reported under its id: tensor_codec messages (host bytes or CUDA IPC), dora "
            "images (encoding rgb8 / bgr8 / mono8 with width and height, or jpeg) and plain Arrow values.",
            {"sent_ns": "optional: wall clock (ns) when the message was sent, for the latency"},
        ),
    ),
    outputs=(),
    settings=SETTINGS,
    example="""\
nodes:
  - id: monitor
    path: tc-monitor
    inputs:
      frames: camera/image
      tensors: sender/tensors
    env:
      PERIOD_S: "1"
""",
)
