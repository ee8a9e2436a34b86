"""The JPEG sink's interface, as its manifest shows it."""

from ..common.delivery import ack_output_port
from ..common.manifest import NodeSpec, Port
from .config import INPUT, SETTINGS

SPEC = NodeSpec(
    name="tc-jpeg-sink",
    description=(
        "Saves the first COUNT JPEG messages as files (checked first: markers, header, jpeg_crc32) and counts the rest."
    ),
    inputs=(Port(INPUT, "JPEG bytes as a flat UInt8 array (encoding: jpeg), e.g. from tc-jpeg-encoder."),),
    outputs=(
        ack_output_port(
            "JPEG", " (empty value; resent duplicates are acknowledged again and skipped)", "the encoder's `ack*` input"
        ),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: jpeg-sink
    path: tc-jpeg-sink
    inputs:
      jpeg: jpeg-encoder/jpeg
    env:
      DIR: out/jpeg
      COUNT: "5"
""",
)
