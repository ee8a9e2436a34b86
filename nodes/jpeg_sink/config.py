"""The JPEG sink's settings table (its config class) and interface (SPEC): what its `dora-node.yml`
and `--help` are written from; no torch or dora here, so main.py answers `--help` at once."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.delivery import ack_output_port
from ..common.manifest import NodeSpec, Port
from ..common.settings import Setting, settings_dataclass

INPUT = "jpeg"

SETTINGS = (
    Setting(
        "DIR",
        "path",
        "out/jpeg",
        "Folder the JPEGs are written to (relative to the dataflow's directory); created if missing.",
    ),
    Setting(
        "COUNT", "int", "5", "Save the first COUNT JPEGs, then only count the rest; 0 = save every one.", minimum=0
    ),
    Setting("PREFIX", "string", "frame", "File names are <PREFIX>-<frame index, 6 digits>.jpg."),
)


@settings_dataclass(SETTINGS)
class SinkConfig:
    """The parsed settings: a field per setting (DIR -> dir)."""


def load_config(env: Mapping[str, str]) -> SinkConfig:
    return SinkConfig.from_env(env)


# The node's interface, as its manifest (dora-node.yml) and --help show it.
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
