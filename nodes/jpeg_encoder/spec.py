"""The JPEG encoder's interface, as its manifest shows it."""

from ..common.delivery import ack_inputs_port, ack_output_port
from ..common.manifest import NodeSpec, Port
from .config import INPUT, OUTPUT, SETTINGS

SPEC = NodeSpec(
    name="tc-jpeg-encoder",
    description=(
        "Encodes frames to JPEG with TorchCodec (CPU or CUDA), NVIDIA nvImageCodec (batched, CUDA) or torchvision "
        "(ENGINE), ordered by construction on CUDA: each worker's own stream waits on the frame's event (the node's "
        "main thread never waits on the host for the producer) and bytes are read only after the encode is known to "
        "be done. Output order is input order."
    ),
    inputs=(
        Port(
            INPUT,
            "Frames: a tv_tensors.Image (uint8, (C, H, W), 1 or 3 channels, CPU or CUDA) through tensor_codec, or a "
            "plain dora image message (rgb8, bgr8, mono8). Anything else is logged, counted and skipped.",
        ),
        ack_inputs_port(
            OUTPUT,
            "Frames being encoded come on top of WINDOW; frames wait, unacknowledged, until there is room, so a "
            "slow consumer slows the frames' sender down. The node ends when `frames` closed and every JPEG was "
            "acknowledged.",
        ),
    ),
    outputs=(
        Port(
            OUTPUT,
            "One JPEG per frame as a flat UInt8 array, the form dora's image nodes (plot, record) read.",
            {
                "encoding": "jpeg",
                "width": "frame width in px",
                "height": "frame height in px",
                "channels": (
                    "channels of the source frame (1 or 3); on a GPU greyscale is encoded as equal RGB, a decoder "
                    "restores 1 channel"
                ),
                "quality": "QUALITY",
                "subsampling": "the JPEG's chroma subsampling as its header says: 420, 444 or gray",
                "jpeg_crc32": "zlib.crc32 of the JPEG bytes; tc-jpeg-decoder refuses a JPEG that no longer matches it",
                "sent_ns": "wall clock (ns) just before sending",
                "(carried)": (
                    "every other key of the frame's metadata (frame, capture_ns, seq, count, stream, pattern, ...), "
                    "except tensor_codec's tc.* keys, checksum, wants_ack and expect"
                ),
                "stream, wants_ack": (
                    "with `ack*` inputs: a stream id of this node's own (seq and count stay the frame's) and "
                    "wants_ack true"
                ),
            },
        ),
        ack_output_port("frame", " when the encoder takes it (empty value)", "the frames' sender's `ack*` input"),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: camera
    path: tc-camera-source
    outputs: [image]
  - id: jpeg-encoder
    path: tc-jpeg-encoder
    inputs:
      frames: {source: camera/image, queue_size: 16}
    outputs: [jpeg]
    env:
      QUALITY: "90"
""",
)
