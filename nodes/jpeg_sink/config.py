"""Settings of the JPEG sink (the table is also its `dora-node.yml` env section)."""

from __future__ import annotations

from collections.abc import Mapping

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
