"""The tensor sender's interface, as its manifest shows it."""

from ..common.delivery import ack_inputs_port
from ..common.manifest import NodeSpec, Port
from .config import OUTPUT, SETTINGS

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
