"""The JPEG sink's interface, as its manifest shows it."""

from ..common.manifest import NodeSpec, Port
from .config import ACK_OUTPUT, INPUT, SETTINGS

SPEC = NodeSpec(
    name="tc-jpeg-sink",
    description="Saves the first COUNT JPEG messages as files (checked first: markers, header, jpeg_crc32) and counts the rest.",
    inputs=(Port(INPUT, "JPEG bytes as a flat UInt8 array (encoding: jpeg), e.g. from tc-jpeg-encoder."),),
    outputs=(
        Port(
            ACK_OUTPUT,
            "Optional. When declared, each JPEG whose metadata has wants_ack=true is acknowledged here (empty value; "
            "resent duplicates are acknowledged again and skipped); wire it to the encoder's `ack*` input.",
            {"seq": "the acknowledged JPEG's seq", "stream": "its stream"},
            optional=True,
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
