"""Settings of the monitor (the table is also its `dora-node.yml` env section)."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.settings import Setting, SettingError, settings_dataclass

SETTINGS = (
    Setting(
        "PERIOD_S",
        "float",
        "1",
        "Seconds between reports: one line per input that received something since the last one (at least 0.1); "
        "0 = only the summary at the end.",
        minimum=0,
        maximum=3600,
    ),
    Setting(
        "ECHO",
        "bool",
        "0",
        "1: also print one line per message, its input, kind and structure (like `ros2 topic echo`, without the "
        "values): for short runs and debugging; on a stream it is a flood.",
    ),
    Setting(
        "MAX_SHOWN",
        "int",
        "6",
        "Items shown per dict, list or tuple in a message's structure; the rest are counted (`... +12 more`).",
        minimum=1,
        maximum=64,
    ),
    Setting(
        "MAX_DEPTH",
        "int",
        "3",
        "Nesting levels shown in a message's structure; deeper containers are counted (`{...3 items}`).",
        minimum=1,
        maximum=16,
    ),
)


@settings_dataclass(SETTINGS)
class MonitorConfig:
    """The parsed settings: a field per setting (PERIOD_S -> period_s)."""


def load_config(env: Mapping[str, str]) -> MonitorConfig:
    config = MonitorConfig.from_env(env)
    if 0 < config.period_s < 0.1:  # a line per input ten times a second and more is a flood, not a monitor
        raise SettingError(f"PERIOD_S: expected 0 (only the summary) or at least 0.1 seconds, got {config.period_s:g}")
    return config
