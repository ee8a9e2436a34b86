"""The JPEG encoder's interface, as its manifest shows it."""

from ..common.manifest import NodeSpec, Port
from .config import INPUT, OUTPUT, SETTINGS

SPEC = NodeSpec(
    name="tc-jpeg-encoder",
    description=(
        "Encodes frames to JPEG: nvJPEG on CUDA through torchvision, ordered by construction (each worker's own "
        "stream waits on the frame's event; bytes are read only after an event recorded after the encode), or "
        "torchvision's CPU encoder on a thread pool when there is no GPU or DEVICE=cpu. Output order is input order."
    ),
    inputs=(
        Port(
            INPUT,
            "Frames: a tv_tensors.Image (uint8, (C, H, W), 1 or 3 channels, CPU or CUDA) through tensor_codec, or a "
            "plain dora image message (rgb8, bgr8, mono8). Anything else is logged, counted and skipped.",
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
                "channels": "channels of the source frame (1 or 3); on a GPU greyscale is encoded as equal RGB, a decoder restores 1 channel",
                "quality": "QUALITY",
                "jpeg_crc32": "zlib.crc32 of the JPEG bytes; tc-jpeg-decoder refuses a JPEG that no longer matches it",
                "sent_ns": "wall clock (ns) just before sending",
                "(carried)": "every other key of the frame's metadata (frame, capture_ns, seq, count, stream, pattern, ...), except tensor_codec's tc.* keys, checksum, wants_ack and expect",
            },
        ),
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
