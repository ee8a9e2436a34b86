"""The JPEG decoder's interface, as its manifest shows it."""

from ..common.delivery import ack_inputs_port, ack_output_port
from ..common.manifest import NodeSpec, Port
from .config import INPUT, OUTPUT, SETTINGS

SPEC = NodeSpec(
    name="tc-jpeg-decoder",
    description=(
        "Decodes JPEG messages to tv_tensors.Image frames sent through tensor_codec, with TorchCodec, nvImageCodec or "
        "torchvision (ENGINE) on CUDA (the node's stream is drained before each decode, so no block still in use is "
        "written) or the CPU; EXIF orientation is applied by every engine. Every JPEG is "
        "checked before any engine sees it: markers, its pixels (MAX_PIXELS), scans (MAX_SCANS), scans x pixels "
        "(MAX_SCAN_PIXELS), marker segments (MAX_SEGMENTS), the decoded frame's bytes against what `image` can "
        "carry, metadata width/height and jpeg_crc32; a bad, corrupt or too costly one is logged with the bound that "
        "refused it, counted and skipped."
    ),
    inputs=(
        Port(
            INPUT,
            "JPEG bytes as a flat UInt8 array (encoding: jpeg), e.g. from tc-jpeg-encoder or any dora camera node "
            "that sends JPEG.",
        ),
        ack_inputs_port(
            OUTPUT,
            "JPEGs wait, unacknowledged, until there is room in the window, so a slow consumer slows the JPEGs' "
            "sender down. The node ends when `jpeg` closed and every frame was acknowledged.",
        ),
    ),
    outputs=(
        Port(
            OUTPUT,
            "One tv_tensors.Image (uint8, (C, H, W)) per JPEG, through tensor_codec, on DEVICE.",
            {
                "pixel_format": (
                    "rgb8 or mono8. Never dora's encoding/width/height: the value is a tensor_codec message, not "
                    "flat pixels (the frame's size is the tensor's shape)"
                ),
                "lossy": (
                    "jpeg: the frame went through JPEG (its content matches the source within bounds, not exactly)"
                ),
                "sent_ns": "wall clock (ns) just before sending",
                "(carried)": (
                    "every other key of the JPEG message (quality, subsampling, frame, capture_ns, seq, count, "
                    "stream, pattern, ...), except encoding, width, height, channels and jpeg_crc32"
                ),
                "stream, wants_ack": (
                    "with `ack*` inputs: a stream id of this node's own (seq and count stay the JPEG's) and "
                    "wants_ack true"
                ),
            },
        ),
        ack_output_port("JPEG", " when the decoder takes it (empty value)", "the JPEGs' sender's `ack*` input"),
    ),
    settings=SETTINGS,
    example="""\
nodes:
  - id: jpeg-decoder
    path: tc-jpeg-decoder
    inputs:
      jpeg: {source: jpeg-encoder/jpeg, queue_size: 16}
    outputs: [image]
  - id: receiver
    path: tc-tensor-receiver
    inputs:
      decoded: jpeg-decoder/image
""",
)
