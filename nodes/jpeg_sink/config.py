"""Settings of the JPEG sink (the table is also its `dora-node.yml` env section)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..common.settings import Setting, as_fields, load_settings

INPUT = "jpeg"
ACK_OUTPUT = "ack"  # acknowledges each JPEG to its sender (when declared)

SETTINGS = (
    Setting("DIR", "path", "out/jpeg", "Folder the JPEGs are written to (relative to the dataflow's directory); created if missing."),
    Setting("COUNT", "int", "5", "Save the first COUNT JPEGs, then only count the rest; 0 = save every one.", minimum=0),
    Setting("PREFIX", "string", "frame", "File names are <PREFIX>-<frame index, 6 digits>.jpg."),
)


@dataclass(frozen=True)
class SinkConfig:
    """The parsed settings (defaults live in SETTINGS)."""

    dir: str
    count: int
    prefix: str


def load_config(env: Mapping[str, str]) -> SinkConfig:
    return SinkConfig(**as_fields(load_settings(env, SETTINGS)))
