"""Metadata keys the nodes put next to tensor_codec's own (`tc.*`) on every message.

Senders number each output's messages so any receiver can count what is good, missing, out of
order or duplicated, and time what it got. A reliable sender (one with an `ack` input) resends a
message until the receiver acknowledges its `seq` on the same `stream`; each copy carries its
transmission number `tx`, which the acknowledgement echoes.
"""

from __future__ import annotations

import time
import uuid

SEQ = "seq"  # 0, 1, 2, ... per stream
COUNT = "count"  # messages the stream will send in all; 0 = open-ended
# A finite stream's length, at most: 100,000 messages a second for 12 hours (a longer run is
# open-ended, count 0). A receiver counts every message of a counted stream it did not see as
# missing, so a count past any real run (2**53 once reported "missing 9007199254740991") is a bad
# message, and a sender may not be set to send more (COUNT, FRAMES).
MAX_COUNT = 2**32
STREAM = "stream"  # an id unique to one run of one sending node's output
# tensor_codec's stamp (tc.stamp, tensor_codec/metadata.py) writes these two; named here too, as
# literals, because importing tensor_codec imports torch and every node's spec (its --help, its
# --version) imports this module. tests/codec/test_stamp_and_carry.py holds them equal.
SENT_NS = "sent_ns"  # wall clock (time.time_ns) just before the send, for latency
CHECKSUM = "checksum"  # the content digest (tensor_codec/digest.py)
CASE = "case"  # what the payload is, for reports
EXPECT = "expect"  # REJECT: a deliberately corrupted message the receiver must refuse
REJECT = "reject"
WANTS_ACK = "wants_ack"  # True: the sender waits for an ack of (stream, seq) on the receiver's `ack` output
# The transmission number of an acknowledged message: 1, 2, 3, ... per sending node, one more for
# every copy it sends (a resend gets a new one; the same copy on several outputs, the same one).
# A consumer echoes it in its ack: dora hands an input's messages over in order, so an ack with
# tx=t tells the sender every copy numbered t or less has left that consumer's queue (taken or
# dropped), and the sender never has more copies queued there than the queue holds (delivery.py).
TX = "tx"

# dora's image convention: a message with these keys has a value of exactly those flat bytes
# (rgb8/bgr8/mono8: height x width x channels, interleaved; jpeg: the file). dora-hub nodes take
# any message carrying them as such an image, so a tensor_codec message never carries them: a
# planar codec frame of H x W x 3 bytes would be read as interleaved pixels, scrambled, silently.
ENCODING = "encoding"  # "rgb8", "bgr8", "mono8", "jpeg"
WIDTH = "width"
HEIGHT = "height"
IMAGE_KEYS = frozenset({ENCODING, WIDTH, HEIGHT})
# A tensor_codec frame (a (C, H, W) tv_tensors.Image) names its channels' meaning here instead;
# its size is the tensor's shape.
PIXEL_FORMAT = "pixel_format"  # "rgb8" or "mono8"
FRAME = "frame"  # frame index
CAPTURE_NS = "capture_ns"  # wall clock when the frame was captured or rendered
PATTERN = "pattern"  # pattern.PATTERN_NAME on synthetic frames: content can be verified
PATTERN_SIZE = "pattern_size"  # "640x480": the size the pattern was rendered at (a crop no longer is)

# JPEG messages (encoding "jpeg") and the frames decoded from them.
QUALITY = "quality"  # JPEG quality the frame was encoded at, 1..100
CHANNELS = "channels"  # channels of the source frame (1 or 3): a decoder restores the same
JPEG_CRC32 = "jpeg_crc32"  # zlib.crc32 of the JPEG bytes: a decoder refuses bytes that changed on the way
SUBSAMPLING = "subsampling"  # chroma subsampling of a JPEG as its header says: "420", "444" or "gray"
LOSSY = "lossy"  # "jpeg" on a frame decoded from a JPEG: its content matches the source within bounds

ACK_INPUT = "ack"
ACK_OUTPUT = "ack"


def carried(metadata: dict, dropped: set[str] | frozenset[str]) -> dict:
    """The keys a node passes on from an input message to the message it makes from it: all but
    tensor_codec's own (`tc.*`) and those in `dropped` (what described the input, not the output).
    The nodes name what they drop (a decoder keeps a frame's `pattern`: the frame it makes shows it
    too); a node of anyone's making uses `tc.carry`, which drops every key that describes a message."""
    return {k: v for k, v in metadata.items() if not k.startswith("tc.") and k not in dropped}


def image_keys(encoding: str, width: int, height: int) -> dict:
    """dora's image keys for a message whose value is flat image bytes (send_plain)."""
    return {ENCODING: encoding, WIDTH: width, HEIGHT: height}


def to_be_refused(metadata: dict) -> bool:
    """A message its sender corrupted on purpose (EXPECT "reject"): a consumer that refuses it
    does what was asked, and counts it apart from the bad messages it did not expect."""
    return metadata.get(EXPECT) == REJECT


def label(metadata: dict) -> str:
    """How logs name a message: its frame index, else its seq."""
    return str(metadata.get(FRAME, metadata.get(SEQ, "?")))


def new_stream_id() -> str:
    return uuid.uuid4().hex[:16]


def now_ns() -> int:
    return time.time_ns()
