"""The rerun sink's interface, as its manifest shows it."""

from ..common.delivery import ack_output_port
from ..common.manifest import NodeSpec, Port
from .config import SETTINGS

SPEC = NodeSpec(
    name="tc-rerun-sink",
    description=(
        "Shows what flows in rerun, the viewer, as what it is: TVTensor images and videos as images, bounding boxes "
        "(any format) as boxes on their canvas, masks as segmentation images, key points as points, JPEGs as encoded "
        "images, other tensors as tensors or plots; nested structures under entity paths that follow them "
        "(/<input>/boxes/[2]), at each message's capture time. Records to an .rrd file and/or streams to a running "
        "viewer. Needs the optional rerun-sdk (pip install 'dora-tensor-codec[rerun]'). A message it cannot show is "
        "logged, counted and skipped."
    ),
    inputs=(
        Port(
            "<any id>",
            "Any number of inputs, each shown under /<input id>: tensor_codec messages (tensors, TVTensors, "
            "PackedSequences, nested dicts/lists/tuples of them), dora plain images (encoding rgb8 / bgr8 / mono8 with "
            "width and height) and JPEGs (encoding jpeg, or bare JPEG bytes).",
            {
                "capture_ns": "optional: the capture_time timeline (else only rerun's log_time)",
                "frame": "optional: the frame timeline",
                "seq": "optional: the seq timeline",
            },
        ),
    ),
    outputs=(
        ack_output_port(
            "message",
            " once taken (shown or not; resent duplicates are acknowledged again and skipped)",
            "the producer's `ack*` input. Without it the sink is a pure observer",
        ),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: rerun-sink
    path: tc-rerun-sink
    inputs:
      frames: camera/image
      jpeg: jpeg-encoder/jpeg
    env:
      RRD: out/recording.rrd   # then: rerun out/recording.rrd
      # CONNECT: auto          # or stream to a viewer started with `rerun`
""",
)
