"""What the hostile node sends into each target, and when: categories of hostile input, each
with the bucket the node under test must count it in, and a seeded plan of them spread between
the real messages. Pure data (no torch, no dora): the runner and the hostile node both read it.

A bucket is one figure the node under test reports (a refusal kind, a summary count, a report
field), so the check is exact: what the hostile node says it sent into a bucket must be what
the node counted there. Categories are finer than buckets (the node does not say why an ack was
malformed, only that it was); the table lists both.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = [
    "Category",
    "Item",
    "TARGETS",
    "ACK_TARGETS",
    "FLOOD_TARGETS",
    "CATEGORIES",
    "FLOOD",
    "MALFORMED_ACK",
    "STRAY_ACK",
    "BAD_MESSAGE",
    "UNVERIFIED",
    "DUPLICATE",
    "REJECTED",
    "BAD_JPEG",
    "BAD_FRAME",
    "ACCEPTED_JPEG",
    "DESCRIBED",
    "plan",
    "bursts",
]

# Buckets: what the node under test counts (see counts.py for where each figure is read).
MALFORMED_ACK = "malformed ack"  # refusal kind "<ack input>: malformed ack"
STRAY_ACK = "ack of nothing in flight"  # the summary's "N acks of nothing in flight"
BAD_MESSAGE = "bad message"  # the receiver's report `bad` (and refusal kind "<input>: bad message")
UNVERIFIED = "unverified"  # the receiver's report `unverified`: decoded, content not checked
DUPLICATE = "duplicate"  # the receiver's report `duplicates`
REJECTED = "rejected"  # the receiver's report `rejected`: marked expect=reject and refused
BAD_JPEG = "bad JPEG"  # the decoder's summary "bad B"
BAD_FRAME = "bad frame"  # the encoder's summary "bad B"
ACCEPTED_JPEG = "accepted JPEG"  # the JPEG sink's "received R ... bad B": R - B
DESCRIBED = "described"  # the monitor's summary "messages M, bad B": M - B - the good ones


@dataclass(frozen=True)
class Category:
    name: str  # what is hostile about it, as the table shows it
    bucket: str


@dataclass(frozen=True)
class Item:
    index: int  # position in the plan: with the seed, all a builder needs to make it again
    category: Category


def _cats(bucket: str, *names: str) -> tuple[Category, ...]:
    return tuple(Category(name, bucket) for name in names)


# Acks into a producer's ack input (the tensor sender's, the camera's). dora converts a dict in
# metadata to its text (a str): a long one is a malformed stream, a short one a stream nothing
# sent (verified against dora 1.1: lists of ints / strings / floats, bools and ints up to 2**63-1
# arrive as themselves; None and bytes arrive as text too).
ACK_CATEGORIES = _cats(
    MALFORMED_ACK,
    "stream a list",
    "stream a dict (dora sends its text, over 64 characters)",
    "stream a 10 kB string",
    "stream an int",
    "seq a string",
    "seq a bool",
    "seq negative",
    "seq a float",
    "seq absent",
    "seq a list",
    "tx a list",
    "tx negative",
    "tx a string",
) + _cats(
    STRAY_ACK,
    "a stream nothing sent",
    "stream a short dict (dora sends its text)",
    "stream absent",
    "this run's stream, seq past its count",
    "this run's stream, seq and tx 2**63-1",
    "a message already acknowledged (late duplicate)",
    "a 64 kB value",
)

# tensor_codec messages into the receiver's data input (good ones, numbered, between them).
RECEIVER_CATEGORIES = (
    _cats(
        BAD_MESSAGE,
        "seq 2**63-1",
        "seq negative",
        "seq a string",
        "count conflicting with the stream's",
        "seq past the stream's count",
        "sent_ns -2**63",
        "capture_ns an hour ahead",
        "stream a list",
        "stream a 10 kB string",
        "header not JSON",
        "header with a wrong nbytes",
        "value truncated",
        "no codec keys",
        "header version 99",
        "a stray tc.version key (wire format 1)",
        "value an Arrow string array",
        "wrong checksum",
        "cuda-ipc transport without handles",
    )
    + _cats(UNVERIFIED, "16 GiB broadcast (4 x 2**30 float32, one element each)")
    + _cats(DUPLICATE, "a good message again")
    + _cats(REJECTED, "corrupted, marked expect=reject")
)

# JPEG messages into the decoder's jpeg input (good ones, numbered, between them).
DECODER_CATEGORIES = _cats(
    BAD_JPEG,
    "not a JPEG (GIF bytes)",
    "empty",
    "truncated to a third",
    "header declaring 8192x8192 (under 3 kB)",
    "progressive, one scan repeated 300 times",
    "100,000 empty comment segments",
    "a bit flipped under jpeg_crc32",
    "value an Arrow int64 array",
    "metadata: encoding png",
    "metadata: encoding an int",
    "metadata: width a string",
    "metadata: height negative",
    "metadata: channels a string",
    "metadata: channels a bool",
    "metadata: channels 2",
    "metadata: jpeg_crc32 a string",
)

# JPEG messages into the JPEG sink, which checks a JPEG's structure, size fields and crc but never
# decodes one nor reads `channels`: a header declaring 8192x8192, or channels it cannot have, are
# saved like any JPEG (the decoder refuses them before decoding).
SINK_CATEGORIES = tuple(c for c in DECODER_CATEGORIES if not c.name.startswith(("header declaring", "metadata: chan")))
SINK_CATEGORIES += _cats(
    ACCEPTED_JPEG,
    "header declaring 8192x8192 (under 3 kB)",
    "metadata: channels a string",
    "metadata: channels a bool",
    "metadata: channels 2",
)

# Frames into the JPEG encoder's frames input (good camera frames, numbered, between them).
ENCODER_CATEGORIES = _cats(
    BAD_FRAME,
    "float32 pixels",
    "bool pixels",
    "4 channels",
    "no channel dimension (H, W)",
    "a 5-D tensor",
    "empty (3, 0, 64)",
    "a side over 65500 px (3 x 1 x 70000, one pixel broadcast)",
    "a BoundingBoxes, not an Image",
    "a dict of tensors",
    "header not JSON",
    "value truncated",
    "no codec keys",
    "raw rgb8 bytes, width says twice the bytes",
    "raw rgb8 bytes, height negative",
    "raw encoding yuv420",
)

# The receiver's tensor_codec messages into the monitor, which decodes nothing and reads neither
# seq, stream nor checksum: it refuses what its header check (tensor_codec.describe, decode's own
# validation) or the value's length against the header refuses, and describes the rest.
MONITOR_REFUSES = (
    "header not JSON",
    "header with a wrong nbytes",
    "value truncated",
    "header version 99",
    "a stray tc.version key (wire format 1)",
    "value an Arrow string array",
    "cuda-ipc transport without handles",
    "corrupted, marked expect=reject",
)
MONITOR_CATEGORIES = tuple(
    Category(c.name, BAD_MESSAGE if c.name in MONITOR_REFUSES else DESCRIBED) for c in RECEIVER_CATEGORIES
)

CATEGORIES = {
    "sender": ACK_CATEGORIES,
    "camera": ACK_CATEGORIES,
    "receiver": RECEIVER_CATEGORIES,
    "decoder": DECODER_CATEGORIES,
    "encoder": ENCODER_CATEGORIES,
    "sink": SINK_CATEGORIES,
    "monitor": MONITOR_CATEGORIES,
    # acks into the JPEG relays' ack inputs (a camera -> encoder -> decoder -> receiver pipeline)
    "encoder-ack": ACK_CATEGORIES,
    "decoder-ack": ACK_CATEGORIES,
}
TARGETS = tuple(CATEGORIES)
ACK_TARGETS = ("sender", "camera", "encoder-ack", "decoder-ack")  # the hostile node is an acker

# The flood: well-formed acks of a stream nothing sent, at a steady rate (node.Flood), while the
# middle half of the real messages goes through (ack targets only).
FLOOD = Category("flood: acks of a stream nothing sent", STRAY_ACK)
FLOOD_TARGETS = ACK_TARGETS


def plan(target: str, seed: int, hostile: int) -> list[Item]:
    """`hostile` items of `target`'s categories in a seeded order (every category once before any
    twice). The flood is not planned: it goes at a rate, over flood_span (node.Flood)."""
    if target not in CATEGORIES:
        raise ValueError(f"target: expected one of {', '.join(TARGETS)}, got {target!r}")
    rng = random.Random(f"tc-fuzz-nodes/{seed}/{target}")
    categories = CATEGORIES[target]
    order: list[Category] = []
    while len(order) < hostile:
        rounds = list(categories)
        rng.shuffle(rounds)
        order += rounds
    return [Item(i, c) for i, c in enumerate(order[:hostile])]


def bursts(items: list[Item], real: int, first: int = 1) -> list[list[Item]]:
    """Which items go just before each of `real` real messages (or their acks): spread evenly
    over messages `first` .. real-1. Never before
    the first message: some categories name the count it announced, or a message delivered
    already (for an ack target, `first` is past its window, so that message was acknowledged by
    every consumer: see node.py). Every item goes before the last real message, so a node that is
    done only once that one is through has read them all."""
    if not 1 <= first < real:
        raise ValueError(f"real messages: expected more than {first}, got {real}")
    out: list[list[Item]] = [[] for _ in range(real)]
    for n, item in enumerate(items):
        out[first + n * (real - first) // len(items)].append(item)
    return out


def flood_span(real: int) -> tuple[int, int]:
    """The real messages [lo, hi) the flood runs through: the middle half (at least one). The
    sender's throughput is measured over them, with the flood and without (its clean run)."""
    lo = max(1, real // 4)
    return lo, max(lo + 1, (3 * real) // 4)
