"""The tensor receiver's settings table (its config class) and interface (SPEC): what its `dora-node.yml`
and `--help` are written from; no torch or dora here, so main.py answers `--help` at once."""

from __future__ import annotations

from collections.abc import Mapping

from ..common.delivery import ack_output_port
from ..common.manifest import NodeSpec, Port
from ..common.settings import Setting, SettingError, settings_dataclass

SETTINGS = (
    Setting(
        "DEVICE",
        "device",
        "auto",
        "Where received tensors are restored: auto (CUDA when present), cpu, cuda or cuda:N.",
    ),
    Setting(
        "VERIFY",
        "choice",
        "full",
        "`full`: checksums, types and attributes, and synthetic frames rebuilt and compared byte for byte (frames "
        "that went through JPEG: within JPEG_MIN_PSNR and JPEG_MAX_MAD). `index`: as full, but synthetic frames only "
        "by the index they carry. `none`: decode and count only.",
        ("full", "index", "none"),
    ),
    Setting(
        "VERIFY_MAX_BYTES",
        "int",
        "1073741824",
        "Checksums cover a message's logical bytes (a broadcast tensor's every repeat, at about 3.5 GB/s): a message "
        "logically bigger than this (1 GiB) is restored and counted, not checksummed (unverified, saying why), so a "
        "few bytes on the wire cannot cost seconds of verification.",
        minimum=1,
    ),
    Setting(
        "JPEG_MIN_PSNR",
        "float",
        "35",
        "Frames that went through JPEG (metadata `lossy`), VERIFY=full: the least PSNR in dB against the synthetic "
        "frame they carry (35 suits quality 90).",
        minimum=0,
    ),
    Setting(
        "JPEG_MAX_MAD",
        "float",
        "3",
        "As JPEG_MIN_PSNR: the largest mean absolute difference per value (0-255).",
        minimum=0,
    ),
    Setting(
        "REPORT",
        "path",
        "",
        "Write the final report as JSON to this path (relative to the dataflow's directory); empty = no file.",
    ),
    Setting(
        "STRICT",
        "bool",
        "1",
        "The receiver's verdict is its exit status: 1 if any message was bad or missing, or none came (so "
        "`dora run` fails and a dataflow serves as a test). 0: exit 0 whatever came (the report and the summary "
        "still say what was wrong), for a dataflow that sends bad messages on purpose.",
    ),
    Setting(
        "PROGRESS_S", "float", "1.0", "Seconds between one-line progress reports (at least 0.1); 0 = none.", minimum=0
    ),
)


@settings_dataclass(SETTINGS)
class ReceiverConfig:
    """The parsed settings: a field per setting (VERIFY -> verify)."""


def load_config(env: Mapping[str, str]) -> ReceiverConfig:
    config = ReceiverConfig.from_env(env)
    if 0 < config.progress_s < 0.1:
        # each idle wake-up costs dora ~5 ms (it builds a backtrace): keep it a report, not a spin
        raise SettingError(f"PROGRESS_S: expected 0 (off) or at least 0.1 seconds, got {config.progress_s:g}")
    return config


# The node's interface, as its manifest (dora-node.yml) and --help show it.
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
