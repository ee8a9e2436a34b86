"""The rerun sink's settings table (its config class) and interface (SPEC): what its `dora-node.yml`
and `--help` are written from; no torch or dora here, so main.py answers `--help` at once."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.delivery import ack_output_port
from ..common.manifest import NodeSpec, Port
from ..common.settings import Setting, SettingError, settings_dataclass

DEFAULT_VIEWER = "rerun+http://127.0.0.1:9876/proxy"  # where `rerun` (the viewer) listens by default

SETTINGS = (
    Setting(
        "RRD",
        "path",
        "out/recording.rrd",
        "Write the recording to this .rrd file (relative to the dataflow's directory; folders are created); "
        "open it with `rerun <file>`. `none`: no file (then CONNECT must name a viewer).",
    ),
    Setting(
        "CONNECT",
        "string",
        "",
        f"Also stream to a running viewer at this address: `auto` for the default ({DEFAULT_VIEWER}, what a plain "
        "`rerun` listens on), or a rerun+http:// URL. Empty: no viewer.",
    ),
    Setting(
        "SPLIT_BY",
        "string",
        "case",
        "A metadata key: a message that has it is shown under /<input>/<its value> (a value's `/` make levels), so a "
        "stream of different things (the tensor sender's payloads, which name themselves in `case`) does not "
        "overwrite itself under one entity. `none`: every message of an input under /<input>.",
    ),
    Setting("APP_ID", "string", "tensor_codec", "The recording's application id (the viewer groups recordings by it)."),
    Setting(
        "REQUIRED",
        "bool",
        "1",
        "1: without rerun-sdk the node says how to install it and exits with status 2. 0: it says so once, then only "
        "takes (and acknowledges) its inputs, recording nothing: what the default pipeline uses, so it runs with or "
        "without the optional extra.",
    ),
)


@settings_dataclass(SETTINGS)
class RerunSinkConfig:
    """The parsed settings: a field per setting (RRD -> rrd), and what they mean."""

    @property
    def file(self) -> str | None:
        return None if self.rrd.lower() == "none" else self.rrd

    @property
    def split_key(self) -> str | None:
        return None if self.split_by.lower() == "none" else self.split_by

    @property
    def viewer(self) -> str | None:
        if not self.connect:
            return None
        return DEFAULT_VIEWER if self.connect.lower() == "auto" else self.connect


def load_config(env: Mapping[str, str]) -> RerunSinkConfig:
    config = RerunSinkConfig.from_env(env)
    if config.file is None and config.viewer is None:
        raise SettingError(
            "RRD and CONNECT: expected a file (RRD=out/recording.rrd) or a viewer (CONNECT=auto), got RRD=none and "
            "no CONNECT"
        )
    if (
        config.connect
        and config.connect.lower() != "auto"
        and not config.connect.startswith(("rerun://", "rerun+http://", "rerun+https://"))
    ):
        raise SettingError(f"CONNECT: expected auto or a rerun+http://host:port/proxy URL, got {config.connect!r}")
    if not config.app_id:
        raise SettingError("APP_ID: expected a name, got ''")
    return config


# The node's interface, as its manifest (dora-node.yml) and --help show it.
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
