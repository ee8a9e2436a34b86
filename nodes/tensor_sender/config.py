"""The tensor sender's settings table (its config class) and interface (SPEC): what its `dora-node.yml`
and `--help` are written from; no torch or dora here, so main.py answers `--help` at once."""

from __future__ import annotations

from collections.abc import Mapping

from ..common import protocol as P
from ..common.delivery import DELIVERY_SETTINGS, ack_inputs_port
from ..common.manifest import NodeSpec, Port
from ..common.settings import Setting, SettingError, settings_dataclass

OUTPUT = "tensors"


def _count(raw: str) -> int | None:
    """COUNT: None = each payload once (`all`), 0 = endless, N = N messages."""
    text = raw.lower()
    if text == "all":
        return None
    if text.isascii() and text.isdigit() and int(text) <= P.MAX_COUNT:
        return int(text)
    raise SettingError(f"expected all, 0 (endless) or a number of messages up to 2**32, got {raw!r:.40}")


SETTINGS = (
    Setting(
        "MODE",
        "choice",
        "suite",
        "`suite`: the failure-mode layouts, every dtype, every TVTensor class, PackedSequences and a nested "
        "detection sample, one message each. `random`: random float32 tensors of SIZES, for load. `safetensors`: "
        "each tensor of FILE.",
        ("suite", "random", "safetensors"),
    ),
    Setting(
        "SIZES",
        "sizes",
        "1MB,16MB",
        "random mode: tensor sizes, comma-separated (KB/MB/GB are 1024-based; each a multiple of 4 bytes).",
    ),
    Setting(
        "FILE", "path", "", "safetensors mode: the `.safetensors` file to send.", required_when="MODE is safetensors"
    ),
    Setting(
        "COUNT",
        "string",
        "all",
        "Messages to send before stopping: `all` = each payload once, N = cycle the payloads until N are sent, 0 = "
        "endless.",
        convert=_count,
    ),
    Setting(
        "RATE", "float", "0", "Messages per second; 0 = as fast as dora (and, with acks, WINDOW) allows.", minimum=0
    ),
    *DELIVERY_SETTINGS,
    Setting(
        "CORRUPT",
        "bool",
        "0",
        "Also send deliberately corrupted messages (truncated buffer, broken header, bad dtype, bad bool bytes) "
        "marked `expect: reject`; a receiver must refuse and count them.",
    ),
    Setting("SEED", "int", "0", "Seed of the suite and of random payloads.", minimum=0),
    Setting(
        "DEVICE", "device", "auto", "Where payloads live before sending: auto (CUDA when present), cpu, cuda or cuda:N."
    ),
    Setting(
        "TRANSPORT",
        "choice",
        "auto",
        "`auto`: CUDA IPC when DEVICE is a GPU and every consumer of the output runs on this machine (same "
        "`deploy: machine`), else host bytes; `TC_TRANSPORT` overrides it, and a message under `TC_IPC_MIN_BYTES` "
        "goes as host bytes restored onto the same GPU. `host`: tensor bytes travel in the dora "
        "message. `cuda-ipc`: CUDA payloads stay in GPU memory shared with receivers on this machine (needs DEVICE "
        "on a GPU).",
        ("auto", "host", "cuda-ipc"),
    ),
    Setting(
        "MAX_IN_FLIGHT",
        "size",
        "1GB",
        "cuda-ipc: bytes of GPU memory the output may have in flight; past it, sending waits for receivers (up to "
        "5 s, then the message is logged and counted lost).",
    ),
)


@settings_dataclass(SETTINGS)
class SenderConfig:
    """The parsed settings: a field per setting (MODE -> mode; count: None = each payload once)."""


def load_config(env: Mapping[str, str]) -> SenderConfig:
    config = SenderConfig.from_env(env)
    bad = [s for s in config.sizes if s % 4 or s == 0]
    if config.mode == "random" and bad:
        raise SettingError(f"SIZES: expected non-zero multiples of 4 bytes (float32 tensors), got {bad}")
    if config.mode == "safetensors" and not config.file:
        raise SettingError("FILE: expected the path of a .safetensors file for MODE=safetensors, got nothing")
    if config.corrupt and config.count == 0:
        raise SettingError("CORRUPT: expected 0 with COUNT=0 (corrupted messages go into a finite run), got 1")
    return config


# The node's interface, as its manifest (dora-node.yml) and --help show it.
SPEC = NodeSpec(
    name="tc-tensor-sender",
    description=(
        "Sends tensors through tensor_codec, each message numbered and checksummed so a receiver can verify it: "
        "the verification suite (failure-mode layouts, every dtype, every TVTensor class, PackedSequences, a nested "
        "detection sample), random tensors of given sizes for load, or the tensors of a .safetensors file."
    ),
    inputs=(
        ack_inputs_port(
            OUTPUT,
            "Without it dora 1.1 delivers nothing for sure (a consumer's queue drops the oldest past queue_size, or "
            "past 10 x queue_size with queue_policy: backpressure). Acks of every other declared output's consumers "
            "count the same.",
        ),
    ),
    outputs=(
        Port(
            OUTPUT,
            "One tensor_codec message per payload. Any other declared output gets the same messages, routed on its "
            "own (TRANSPORT=auto): wire this machine's receivers to one output and other machines' to another, and the "
            "local ones get CUDA IPC while the remote ones get host bytes.",
            {
                "seq": "per-stream sequence number, 0, 1, 2, ...",
                "count": "messages this run sends in all (0 = endless)",
                "stream": "id of this run of the node",
                "case": "what the payload is (suite/<case>, random/<size>, file/<tensor name>, corrupt/<how>)",
                "checksum": (
                    "content digest (crc32) of the object: structure, types, TVTensor attributes, dtypes, shapes, "
                    "values"
                ),
                "sent_ns": "wall clock (ns since the epoch) just before sending",
                "wants_ack": "true when the node waits for acknowledgements",
                "expect": "reject, on deliberately corrupted messages (CORRUPT=1)",
                "tc.*": "tensor_codec's own keys",
            },
        ),
        Port(
            "<any other id>",
            "Optional. Every other declared output gets the same messages as `tensors`, each routed on its own "
            "(e.g. `local` and `remote`).",
            optional=True,
        ),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: sender
    path: tc-tensor-sender
    shared_memory_pool_size: 128MB  # room for two 16 MB messages in flight
    inputs:
      ack: {source: receiver/ack, queue_size: 256}
    outputs: [tensors]
    env:
      MODE: random
      SIZES: 1MB,16MB
      COUNT: "100"
  - id: receiver
    path: tc-tensor-receiver
    inputs:
      tensors: {source: sender/tensors, queue_size: 64}
    outputs: [ack]
    env:
      STRICT: "1"
""",
)
