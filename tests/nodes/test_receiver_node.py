"""Tensor receiver without a daemon: verdicts, counts, latency, reports."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec.digest import content_digest
from tensor_codec.dora import Link
from tensor_codec.testing import make_suite
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.pattern import PATTERN_NAME, render
from tensor_codec_nodes.common.stats import Latencies, SeqTracker
from tensor_codec_nodes.tensor_receiver.receiver import Receiver, ack_for
from tensor_codec_nodes.tensor_receiver.report import progress_line, summary_table
from tensor_codec_nodes.tensor_sender.payloads import corrupted_messages

CPU = torch.device("cpu")


def codec_event(obj, seq, *, count=0, stream="s", input_id="tensors", **extra):
    value, metadata = tc.encode(obj)
    metadata.update({P.SEQ: seq, P.COUNT: count, P.STREAM: stream, P.CHECKSUM: content_digest(obj), **extra})
    return {"type": "INPUT", "id": input_id, "value": value, "metadata": metadata}


def frame_metadata(index, height=120, width=160, channels=3):
    """A raw frame's metadata, as the camera sends it with FORMAT=raw (dora's image keys)."""
    return {
        P.SEQ: index,
        P.COUNT: 0,
        P.STREAM: "cam",
        P.FRAME: index,
        P.ENCODING: "rgb8" if channels == 3 else "mono8",
        P.WIDTH: width,
        P.HEIGHT: height,
        P.PATTERN: PATTERN_NAME,
        P.PATTERN_SIZE: f"{width}x{height}",
    }


def codec_frame_event(index, frame=None):
    """A tensor_codec frame, as the camera sends it with FORMAT=codec: `pixel_format`, no image keys."""
    frame = render(index, 120, 160) if frame is None else frame
    value, metadata = tc.encode(tv_tensors.Image(frame))
    ours = {
        P.SEQ: index,
        P.COUNT: 0,
        P.STREAM: "cam",
        P.FRAME: index,
        P.PIXEL_FORMAT: "rgb8",
        P.PATTERN: PATTERN_NAME,
        P.PATTERN_SIZE: "160x120",
    }
    return {"type": "INPUT", "id": "frames", "value": value, "metadata": {**metadata, **ours}}


def raw_frame_event(index, frame=None):
    frame = render(index, 120, 160) if frame is None else frame
    value = pa.array(frame.permute(1, 2, 0).contiguous().reshape(-1).numpy())
    return {"type": "INPUT", "id": "frames", "value": value, "metadata": frame_metadata(index)}


def test_the_whole_suite_is_good():
    receiver = Receiver(CPU)
    suite = make_suite()
    verdicts = [receiver.handle(codec_event(obj, i, count=len(suite))) for i, obj in enumerate(suite.values())]
    assert verdicts == ["good"] * len(suite)
    stats = receiver.report()["inputs"]["tensors"]
    assert (stats["good"], stats["missing"], stats["expected"]) == (len(suite), 0, len(suite))
    assert receiver.ok


def test_checksum_type_or_attribute_changes_are_bad():
    receiver = Receiver(CPU)
    boxes = make_suite()["tv/boxes_xyxy"]
    event = codec_event(boxes, 0)
    event["metadata"][P.CHECKSUM] = content_digest(boxes.as_subclass(torch.Tensor))  # sender said: a plain tensor
    assert receiver.handle(event) == "bad"
    assert "checksum: expected crc32:" in receiver.report()["inputs"]["tensors"]["failures"][0]
    assert not receiver.ok


def test_corrupted_messages_are_counted_and_the_receiver_goes_on():
    receiver = Receiver(CPU)
    good = torch.arange(10.0)
    seq = 0
    for case, value, metadata in corrupted_messages(0):
        event = {"type": "INPUT", "id": "tensors", "value": value, "metadata": {**metadata, P.SEQ: seq, P.CASE: case}}
        assert receiver.handle(event) == "bad", case
        seq += 1
        assert receiver.handle(codec_event(good, seq)) == "good"
        seq += 1
    stats = receiver.report()["inputs"]["tensors"]
    assert (stats["bad"], stats["good"]) == (5, 5)
    assert any("truncated_buffer" in f and "expected" in f for f in stats["failures"])


def test_expected_rejections_count_as_rejected_and_an_accepted_one_is_bad():
    receiver = Receiver(CPU)
    case, value, metadata = corrupted_messages(0)[0]
    event = {"type": "INPUT", "id": "t", "value": value, "metadata": {**metadata, P.SEQ: 0, P.EXPECT: "reject"}}
    assert receiver.handle(event) == "rejected"
    sound = codec_event(torch.ones(3), 1, input_id="t", **{P.EXPECT: "reject"})
    assert receiver.handle(sound) == "bad"
    assert receiver.report()["inputs"]["t"]["rejected"] == 1


def test_duplicates_out_of_order_and_missing():
    receiver = Receiver(CPU)
    t = torch.ones(4)
    for seq in (0, 2, 1, 2, 4):
        receiver.handle(codec_event(t, seq, count=6))
    stats = receiver.report()["inputs"]["tensors"]
    assert (stats["received"], stats["duplicates"], stats["out_of_order"], stats["missing"]) == (4, 1, 1, 2)
    assert not receiver.ok


def test_streams_of_one_input_are_counted_apart():
    receiver = Receiver(CPU)
    for stream in ("first-run", "second-run"):
        for seq in range(3):
            assert receiver.handle(codec_event(torch.ones(1), seq, count=3, stream=stream)) == "good"
    stats = receiver.report()["inputs"]["tensors"]
    assert (stats["received"], stats["expected"], stats["missing"]) == (6, 6, 0)


@pytest.mark.parametrize("count", [2**53, 2**32 + 1])
def test_a_count_no_finite_stream_has_is_a_bad_message_not_a_missing_figure(count):
    """count 2**53 on a fresh stream reported "missing 9007199254740991" (256 such streams: 2.3e18)."""
    receiver = Receiver(CPU, inputs=["tensors"])
    assert receiver.handle(codec_event(torch.ones(2), 0, count=count)) == "bad"
    stats = receiver.report()["inputs"]["tensors"]
    assert (stats["bad"], stats["missing"], stats["expected"]) == (1, 0, None)
    assert stats["failures"][0].endswith(
        f"metadata.count: expected an integer from 0 (open-ended) to 2**32 (a finite stream's length), got int {count}"
    )
    assert receiver.refusals.counts == {"tensors: bad message": 1}


def test_the_longest_finite_stream_is_counted():
    receiver = Receiver(CPU, inputs=["tensors"])
    assert receiver.handle(codec_event(torch.ones(2), 0, count=2**32)) == "good"
    assert receiver.report()["inputs"]["tensors"]["missing"] == 2**32 - 1


@pytest.mark.parametrize("first", [2_000_000, 2**53])
def test_an_open_ended_stream_is_counted_from_the_first_seq_seen(first):
    """A fresh open-ended stream's first seq 2**53 reported "missing 9007199254740992"; a receiver
    started late on a camera's stream counted every frame before it as missing."""
    receiver = Receiver(CPU, inputs=["tensors"])
    for seq in (first, first - 1, first - 3):  # the first to arrive is not the lowest
        assert receiver.handle(codec_event(torch.ones(2), seq)) == "good"
    assert receiver.report()["inputs"]["tensors"]["missing"] == 1  # first - 2


@pytest.mark.parametrize("make_event", [codec_frame_event, raw_frame_event], ids=["codec", "raw-rgb8"])
def test_synthetic_frames_are_verified_byte_for_byte(make_event):
    receiver = Receiver(CPU)
    assert receiver.handle(make_event(5)) == "good"
    tampered = render(6, 120, 160)
    tampered[0, 100, 100] += 1
    assert receiver.handle(make_event(6, tampered)) == "bad"
    assert receiver.handle(make_event(7, render(8, 120, 160))) == "bad"  # carries another index
    failures = receiver.report()["inputs"]["frames"]["failures"]
    assert "pixels: expected synthetic frame 6 exactly, got 1 of 57600 values different" in failures[0]
    assert "frame index in the pixels: expected 7, got 8" in failures[1]
    index_only = Receiver(CPU, verify_mode="index")
    assert index_only.handle(make_event(6, tampered)) == "good"


def test_bgr8_and_mono8_images_and_broken_image_messages():
    receiver = Receiver(CPU)
    frame = render(3, 120, 160)
    bgr = pa.array(frame.flip(0).permute(1, 2, 0).contiguous().reshape(-1).numpy())
    assert (
        receiver.handle(
            {"type": "INPUT", "id": "f", "value": bgr, "metadata": {**frame_metadata(3), P.ENCODING: "bgr8"}}
        )
        == "good"
    )
    mono = render(4, 120, 160, channels=1)
    value = pa.array(mono.reshape(-1).numpy())
    assert (
        receiver.handle({"type": "INPUT", "id": "f", "value": value, "metadata": frame_metadata(4, channels=1)})
        == "good"
    )
    short = pa.array(frame.reshape(-1)[:-3].numpy())
    assert (
        receiver.handle({"type": "INPUT", "id": "f", "value": short, "metadata": {**frame_metadata(5), P.SEQ: 5}})
        == "bad"
    )
    assert (
        receiver.handle(
            {"type": "INPUT", "id": "f", "value": value, "metadata": {**frame_metadata(6, channels=1), P.WIDTH: -1}}
        )
        == "bad"
    )
    failures = receiver.report()["inputs"]["f"]["failures"]
    assert "value: expected 160x120x3 = 57600 bytes for rgb8, got 57597" in failures[0]
    assert "metadata.width: expected a positive integer, got -1" in failures[1]


def test_a_frame_of_the_wrong_type_is_bad():
    receiver = Receiver(CPU)
    value, metadata = tc.encode(render(1, 120, 160))  # a plain tensor, not an Image
    event = {"type": "INPUT", "id": "frames", "value": value, "metadata": {**metadata, **frame_metadata(1)}}
    assert receiver.handle(event) == "bad"
    assert (
        "type: expected torchvision.tv_tensors.Image, got torch.Tensor"
        in receiver.report()["inputs"]["frames"]["failures"][0]
    )


def test_age_is_measured_from_capture_ns_through_every_hop():
    from torchvision import tv_tensors

    from tensor_codec_nodes.common.pattern import render

    clock = iter([10_000_000, 19_000_000])
    receiver = Receiver(torch.device("cpu"), clock_ns=lambda: next(clock), inputs=["frames"])
    value, meta = tc.encode(tv_tensors.Image(render(0, 240, 320)))
    meta.update(
        {
            P.ENCODING: "rgb8",
            P.WIDTH: 320,
            P.HEIGHT: 240,
            P.FRAME: 0,
            P.PATTERN: PATTERN_NAME,
            P.SENT_NS: 15_000_000,
            P.CAPTURE_NS: 1_000_000,
        }
    )
    assert receiver.handle({"type": "INPUT", "id": "frames", "value": value, "metadata": meta}) == "good"
    stats = receiver.report()["inputs"]["frames"]
    assert stats["latency_ms"]["p50"] == pytest.approx(4.0) and stats["age_ms"]["p50"] == pytest.approx(18.0)
    assert "age p50" in summary_table(receiver.report())


def test_latency_is_measured_from_sent_ns():
    clock = iter([1_000_000, 4_000_000]).__next__
    receiver = Receiver(CPU, clock_ns=clock)
    event = codec_event(torch.ones(2), 0, **{P.SENT_NS: 500_000})
    assert receiver.handle(event) == "good"
    assert receiver.report()["inputs"]["tensors"]["latency_ms"]["p50"] == pytest.approx(3.5)


def test_nothing_received_is_not_ok_and_reports_render():
    receiver = Receiver(CPU)
    assert not receiver.ok
    assert "no messages received" in summary_table(receiver.report())
    receiver.handle(codec_event(torch.ones(2), 0, count=1))
    table = summary_table(receiver.report())
    assert table.startswith("tensor receiver summary: PASS") and "tensors" in table and "1/1" in table
    assert progress_line(receiver.report()).startswith("tensor receiver: tensors 1 good 0 bad")


def test_seq_tracker_stays_bounded_on_endless_streams_with_a_gap():
    tracker = SeqTracker(horizon=100)
    tracker.see(0)
    for seq in range(2, 1000):
        tracker.see(seq)
    assert len(tracker.above) <= 100 and tracker.missing(0) == 1


def test_latencies_percentiles_and_bounded_samples():
    lat = Latencies(limit=1000)
    for i in range(10_000):
        lat.add(float(i % 100))
    assert len(lat.samples) < 1000
    assert 45 <= lat.percentile(50) <= 55 and lat.percentile(99) >= 97


@pytest.mark.gpu
def test_restores_onto_cuda_with_every_attribute():
    receiver = Receiver(torch.device("cuda", 0))
    suite = make_suite()
    for i, obj in enumerate(suite.values()):
        assert receiver.handle(codec_event(obj, i, count=len(suite))) == "good"
    assert receiver.handle(codec_frame_event(0)) == "good"
    assert receiver.handle(raw_frame_event(1)) == "good"
    assert receiver.ok


def test_an_input_that_never_delivers_fails_the_run():
    receiver = Receiver(CPU, inputs={"frames", "tensors"})
    receiver.handle(codec_event(torch.ones(2), 0, count=1))
    assert not receiver.ok
    assert receiver.report()["inputs"]["frames"]["received"] == 0
    assert "frames" in summary_table(receiver.report())


def test_messages_without_anything_to_check_are_unverified_never_good():
    receiver = Receiver(CPU)
    value, metadata = tc.encode(torch.ones(3))
    assert receiver.handle({"type": "INPUT", "id": "x", "value": value, "metadata": metadata}) == "unverified"
    assert receiver.handle(codec_event(torch.ones(3), 0, input_id="x")) == "good"
    stats = receiver.report()["inputs"]["x"]
    assert (stats["good"], stats["unverified"], stats["bad"]) == (1, 1, 0)
    assert stats["unverified_because"] == {"nothing to check against (no checksum, no pixel format)": 1}
    assert receiver.ok  # nothing bad: unverified is reported, not failed
    assert "1 unverified: nothing to check against" in summary_table(receiver.report())


def test_a_real_cameras_frame_is_unverified_with_its_reason():
    receiver = Receiver(CPU)
    event = raw_frame_event(0)
    for key in (P.PATTERN, P.PATTERN_SIZE):
        del event["metadata"][key]
    assert receiver.handle(event) == "unverified"
    (reason,) = receiver.report()["inputs"]["frames"]["unverified_because"]
    assert "no pattern or checksum" in reason


@pytest.mark.parametrize("make", [raw_frame_event, codec_frame_event], ids=["raw", "codec"])
def test_a_frame_cropped_upstream_is_unverified_not_bad(make):
    """A hub node (the image splitter) cut the frame: its pattern no longer fits its size, so
    nothing can be verified; that is said, and not called a bad frame."""
    full = render(3, 120, 160)
    event = make(3, full[:, :, :80].contiguous())
    if P.ENCODING in event["metadata"]:
        event["metadata"][P.WIDTH] = 80
    receiver = Receiver(CPU)
    assert receiver.handle(event) == "unverified"
    (reason,) = receiver.report()["inputs"]["frames"]["unverified_because"]
    assert reason.startswith("frame is 80x120, its pattern was rendered at 160x120: cropped or resized upstream?"), (
        reason
    )
    assert "VERIFY=none" in reason


def test_a_damaged_frame_of_the_patterns_own_size_is_still_bad():
    frame = render(3, 120, 160)
    frame[:, :16, :] = 0  # the index strip wiped
    receiver = Receiver(CPU)
    assert receiver.handle(codec_frame_event(3, frame)) == "bad"
    assert (
        "frame index in the pixels: expected 3, got unreadable" in receiver.report()["inputs"]["frames"]["failures"][0]
    )


def test_verify_none_counts_everything_as_unverified():
    receiver = Receiver(CPU, verify_mode="none")
    assert receiver.handle(codec_frame_event(0)) == "unverified"
    assert receiver.report()["inputs"]["frames"]["unverified_because"] == {"VERIFY=none": 1}


def test_a_jpeg_input_is_told_to_go_through_the_decoder():
    receiver = Receiver(CPU)
    jpeg = pa.array(bytes([0xFF, 0xD8, 0xFF, 0xD9]) * 4, type=pa.uint8())
    event = {
        "type": "INPUT",
        "id": "halves",
        "value": jpeg,
        "metadata": {P.ENCODING: "jpeg", P.WIDTH: 80, P.HEIGHT: 120, P.SEQ: 0},
    }
    assert receiver.handle(event) == "bad"
    (failure,) = receiver.report()["inputs"]["halves"]["failures"]
    assert "got 'jpeg', a compressed image: wire this input through tc-jpeg-decoder" in failure


def test_duplicates_do_not_count_towards_the_message_rate():
    ticks = iter(range(0, 10**10, 10**9))  # one second per event
    receiver = Receiver(CPU, clock_ns=lambda: next(ticks))
    for seq in (0, 1, 1, 1, 2):
        receiver.handle(codec_event(torch.ones(1), seq))
    assert receiver.report()["inputs"]["tensors"]["fps"] == pytest.approx(0.5)  # 3 messages over 4 s


def test_acks_only_for_senders_that_want_them():
    assert ack_for({P.SEQ: 4, P.STREAM: "s", P.WANTS_ACK: True}) == {P.SEQ: 4, P.STREAM: "s"}
    assert ack_for({P.SEQ: 4, P.STREAM: "s"}) is None
    assert ack_for({P.SEQ: "4", P.WANTS_ACK: True}) is None


def test_the_report_counts_the_transport_of_each_good_message():
    receiver = Receiver(torch.device("cpu"), inputs=("tensors",))
    assert receiver.handle(codec_event(torch.arange(6), 0, count=1)) == "good"
    assert receiver.report()["inputs"]["tensors"]["transports"] == {"host": 1}


def test_the_receivers_verdict_is_its_exit_status_by_default():
    """A receiver that met a bad message (or none at all) exited 0 unless STRICT=1 was set: a
    dataflow that went wrong passed. Now STRICT defaults to 1, and STRICT=0 opts out."""
    import logging

    from tensor_codec_nodes.common.loop import EXIT_FAILED, EXIT_OK
    from tensor_codec_nodes.tensor_receiver.config import load_config
    from tensor_codec_nodes.tensor_receiver.node import TensorReceiver
    from tests.support.fakes import FakeNode

    def exit_status(env, events):
        logic = TensorReceiver(load_config(env), CPU, logging.getLogger("t"))
        logic.start(Link.of(FakeNode(inputs=["tensors"])))
        for event in events:
            logic.on_input(event)
        return logic.finish()

    payload = torch.arange(4, dtype=torch.float32)
    bad = codec_event(payload, 0, count=1)
    bad["metadata"][P.CHECKSUM] = "crc32:00000000"
    assert load_config({}).strict is True
    assert exit_status({}, [bad]) == EXIT_FAILED
    assert exit_status({}, []) == EXIT_FAILED  # none came
    assert exit_status({}, [codec_event(payload, 0, count=1)]) == EXIT_OK
    assert exit_status({"STRICT": "0"}, [bad]) == EXIT_OK
