"""The tensor receiver's interface, as its manifest shows it."""

from ..common.delivery import ack_output_port
from ..common.manifest import NodeSpec, Port
from .config import SETTINGS

SPEC = NodeSpec(
    name="tc-tensor-receiver",
    description=(
        "Restores every message through tensor_codec (or a dora image message: flat rgb8/bgr8/mono8 with width and "
        "height) onto DEVICE, verifies it (checksum, type, TVTensor attributes, synthetic frames byte for byte, "
        "sequence), measures latency from send to usable tensor, prints progress and a summary table, and writes "
        "a JSON report. A bad message is logged and counted; the node goes on."
    ),
    inputs=(
        Port(
            "<any id>",
            "Any number of inputs, each counted and reported separately (e.g. frames, tensors). Give them a "
            "queue_size: dora's default is small and drops the oldest messages.",
        ),
    ),
    outputs=(
        ack_output_port(
            "message", " (empty value, metadata seq and stream)", "the senders' `ack` inputs", every="every"
        ),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: receiver
    path: tc-tensor-receiver
    inputs:
      frames: {source: camera/image, queue_size: 64}
      tensors: {source: sender/tensors, queue_size: 256}
    outputs: [ack]
    env:
      DEVICE: auto
      REPORT: out/receiver-report.json
      STRICT: "1"
""",
)
