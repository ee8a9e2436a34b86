"""The monitor's settings table (its config class) and interface (SPEC): what its `dora-node.yml`
and `--help` are written from; no torch or dora here, so main.py answers `--help` at once."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.manifest import NodeSpec, Port
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


# The node's interface, as its manifest (dora-node.yml) and --help show it.
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
