"""tc-monitor: what a message is from its header alone (tensor_codec.describe), dora images and
plain Arrow values, hostile messages refused by name, rates, bandwidth and latency from fake
clocks, the lines and the summary it prints, CUDA IPC messages passed over without a copy, and
its settings. (In a real dataflow: tests/e2e/test_monitor_e2e.py.)"""

from __future__ import annotations

import collections
import json
import logging

import pyarrow as pa
import pytest
import torch
from torch.nn.utils.rnn import pack_sequence
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec.cuda_ipc import transport as cuda_ipc
from tensor_codec.describe import describe
from tensor_codec.dora import Link
from tensor_codec.transports import ENCODE_OUTPUT
from tensor_codec_nodes.common.hostile import Refusals
from tensor_codec_nodes.common.loop import EXIT_OK, EventLoop
from tensor_codec_nodes.common.settings import SettingError
from tensor_codec_nodes.monitor.config import load_config
from tensor_codec_nodes.monitor.monitor import Monitor, fmt_bytes, look
from tensor_codec_nodes.monitor.node import MonitorNode, pass_ipc
from tests.ipc.other_process import claim_and_release_elsewhere, slot_of
from tests.support.fakes import FakeNode
from tests.support.ipc_fake_backend import installed
from tests.support.wire import with_transport

Point = collections.namedtuple("Point", "x y")


def described(obj, **kw) -> str:
    value, metadata = tc.encode(obj)
    return describe(metadata, value, **kw).structure


# ------------------------------------------------------------------------------ describe: every kind


@pytest.mark.parametrize(
    "tensor, text",
    [
        (torch.zeros(2, 3), "Tensor float32[2, 3]"),
        (torch.zeros(4, dtype=torch.uint8), "Tensor uint8[4]"),
        (torch.zeros(2, 2, dtype=torch.bfloat16), "Tensor bfloat16[2, 2]"),
        (torch.zeros(3, dtype=torch.bool), "Tensor bool[3]"),
        (torch.zeros(1, 5, dtype=torch.complex64), "Tensor complex64[1, 5]"),
        (torch.tensor(7, dtype=torch.int64), "Tensor int64[]"),
        (torch.zeros(0, 3, dtype=torch.float16), "Tensor float16[0, 3]"),
        (torch.zeros(3, requires_grad=True), "Tensor float32[3] requires_grad"),
    ],
)
def test_plain_tensors_show_dtype_and_shape(tensor, text):
    assert described(tensor) == text


def test_every_tvtensor_shows_its_class_and_attributes():
    obj = {
        "image": tv_tensors.Image(torch.zeros(3, 48, 64, dtype=torch.uint8)),
        "video": tv_tensors.Video(torch.zeros(2, 3, 8, 8)),
        "mask": tv_tensors.Mask(torch.zeros(48, 64, dtype=torch.bool)),
        "boxes": tv_tensors.BoundingBoxes(torch.zeros(2, 4), format="CXCYWH", canvas_size=(48, 64)),
        "points": tv_tensors.KeyPoints(torch.zeros(5, 2), canvas_size=(48, 64)),
    }
    assert described(obj) == (
        "{image: Image uint8[3, 48, 64], video: Video float32[2, 3, 8, 8], mask: Mask bool[48, 64], "
        "boxes: BoundingBoxes float32[2, 4] format=CXCYWH canvas_size=(48, 64), "
        "points: KeyPoints float32[5, 2] canvas_size=(48, 64)}"
    )
    hard = tv_tensors.BoundingBoxes(torch.zeros(1, 4), format="XYXY", canvas_size=(4, 4))
    if hasattr(hard, "clamping_mode"):  # torchvision >= 0.23: shown when not its default
        hard.clamping_mode = "hard"
        assert described(hard) == "BoundingBoxes float32[1, 4] format=XYXY canvas_size=(4, 4) clamping_mode=hard"


def test_packed_sequences_namedtuples_and_nested_containers_with_their_keys():
    packed = pack_sequence([torch.ones(3, 2), torch.ones(2, 2)])
    assert described(packed) == "PackedSequence(data=Tensor float32[5, 2], batch_sizes=Tensor int64[3])"
    unsorted = pack_sequence([torch.ones(2), torch.ones(3)], enforce_sorted=False)
    assert described(unsorted).endswith("sorted_indices=Tensor int64[2], unsorted_indices=Tensor int64[2])")
    obj = {"pt": Point(torch.ones(2), 3), 7: [1, "two", None, 2.5, float("nan"), True], "t": (torch.ones(1),)}
    assert described(obj) == (
        "{pt: Point(x=Tensor float32[2], y=3), 7: [1, 'two', None, 2.5, nan, True], t: (Tensor float32[1],)}"
    )
    assert described({"a key": {}, "": []}) == "{'a key': {}, '': []}"


def test_width_depth_and_length_bound_the_description():
    assert described(list(range(100)), width=3) == "[0, 1, 2, ... +97 more]"
    assert described({"a": {"b": {"c": {"d": 1}}}}, depth=2) == "{a: {b: {...1 item}}}"
    assert described([[torch.ones(1)] * 3] * 2, depth=1) == "[[...3 items], [...3 items]]"
    text = described({f"k{i}": torch.ones(1) for i in range(200)}, width=200, max_chars=120)
    assert len(text) == 120 and text.endswith("...")
    long_key = described({"x" * 500: "y" * 500})
    assert len(long_key) < 80 and "..." in long_key
    with pytest.raises(tc.UsageError, match=r"describe: width: expected an integer 1..1024, got 0"):
        describe({}, width=0)


def test_the_description_says_transport_leaves_and_bytes():
    value, metadata = tc.encode({"a": torch.zeros(10), "b": torch.zeros(3, dtype=torch.uint8)})
    d = describe(metadata, value)
    assert (d.transport, d.leaves, d.nbytes, d.gpu) == ("host", 2, len(value), None)
    assert d.nbytes == 64 + 3 and str(d) == d.structure
    assert describe(metadata).structure == d.structure  # the metadata alone is enough


# ------------------------------------------------------------------------------ describe: hostile


def header_with(metadata: dict, change) -> dict:
    header = json.loads(metadata["tc.header"])
    change(header)
    return {**metadata, "tc.header": json.dumps(header)}


GOOD = tc.encode(tv_tensors.BoundingBoxes(torch.zeros(2, 4), format="XYXY", canvas_size=(8, 8)))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda m: ["not", "a", "dict"], r"^metadata: expected a dict, got list"),
        (lambda m: {"encoding": "rgb8", "tc.header": 1}, r"^tc.header: expected a JSON string, got int"),
        (lambda m: {**m, "tc.version": 99}, r"^tc.version: expected no such key .*older wire format"),
        (lambda m: with_transport(m, "carrier-pigeon"), r"^tc.header.transport: expected one of"),
        (lambda m: {**m, "tc.header": "{not json"}, r"tc.header"),
        (lambda m: {**m, "tc.header": 5}, r"^tc.header: expected a JSON string, got int"),
        (
            lambda m: header_with(m, lambda h: h["leaves"][0].update(dtype="float128")),
            r"^tc.header.leaves\[0\].dtype",
        ),
        (
            lambda m: header_with(m, lambda h: h["leaves"][0].update(shape=[2, -4])),
            r"^tc.header.leaves\[0\].shape: expected integers in \[0, 2\*\*62\], got -4",
        ),
        (
            lambda m: header_with(m, lambda h: h["tree"].update(t="tv.Teapot")),
            r"^tc.header.tree.t: expected a known tag",
        ),
        (
            lambda m: header_with(m, lambda h: h["tree"].update(format="XYZW")),
            r"^tc.header.tree.format: expected one of .*got 'XYZW'",
        ),
        (
            lambda m: header_with(m, lambda h: h["tree"].update(canvas_size=[8])),
            r"^tc.header.tree.canvas_size: expected \[height, width\]",
        ),
        (lambda m: header_with(m, lambda h: h["tree"].update(leaf=1)), r"^tc.header.tree.leaf: expected leaf index 0"),
        (
            lambda m: header_with(m, lambda h: h["leaves"][0].update(offset=64)),
            r"^tc.header.leaves\[0\].offset: expected 0",
        ),
        (lambda m: header_with(m, lambda h: h.update(extra=1)), r"^tc.header: expected only keys"),
    ],
)
def test_hostile_metadata_is_a_decode_error_naming_the_field(make, message):
    value, metadata = GOOD
    with pytest.raises(tc.DecodeError, match=message):
        describe(make(dict(metadata)), value)


def test_a_value_that_does_not_match_the_header_is_refused():
    value, metadata = GOOD
    with pytest.raises(tc.DecodeError, match=r"^value: expected 32 bytes \(the end of the last leaf\), got 31"):
        describe(metadata, value.slice(0, 31))
    with pytest.raises(tc.DecodeError, match=r"^value: expected Arrow type uint8, int8, .*double, got string"):
        describe(metadata, pa.array(["x"] * 32))
    with pytest.raises(tc.DecodeError, match=r"^tc.ipc.handle: expected base64"):
        describe({**metadata, "tc.header": _ipc_header(metadata)}, pa.array([], pa.uint8()))


def _ipc_header(metadata: dict) -> str:
    """The host header made a CUDA IPC one (canonical offsets alike for one leaf), with a producer."""
    header = json.loads(metadata["tc.header"])
    header["transport"] = "cuda-ipc"
    header["producer"] = {
        "host": "h",
        "pidns": "ns",
        "pid": 1,
        "gpu": "GPU-00000000-1111-2222-3333-444444444444",
        "ledger": "tc-1-0123456789ab",
    }
    return json.dumps(header)


def test_a_huge_header_is_refused_by_the_limits_before_it_is_parsed():
    _, metadata = tc.encode(torch.zeros(1))
    huge = {**metadata, "tc.header": metadata["tc.header"][:-1] + ',"x":' + json.dumps("y" * 10_000) + "}"}
    previous = tc.set_limits(header_bytes=4096)
    try:
        with pytest.raises(tc.DecodeError, match=r"^tc.header: expected at most 4096 bytes"):
            describe(huge)
    finally:
        tc.set_limits(previous)


# ------------------------------------------------------------------------------ dora images, Arrow


def test_dora_images_show_encoding_and_size_and_are_checked():
    raw = pa.array(bytes(6 * 4 * 3), pa.uint8())
    seen = look(raw, {"encoding": "rgb8", "width": 6, "height": 4})
    assert (seen.kind, seen.what, seen.nbytes) == ("dora image", "rgb8 6x4", 72)
    assert look(pa.array(bytes(24), pa.uint8()), {"encoding": "mono8", "width": 6, "height": 4}).what == "mono8 6x4"
    jpeg = look(pa.array(b"\xff\xd8" + bytes(1998), pa.uint8()), {"encoding": "jpeg", "width": 640, "height": 480})
    assert jpeg.what == "jpeg 640x480, 2.0 kB"
    with pytest.raises(tc.DecodeError, match=r"^value: expected 6x4x3 = 72 bytes for rgb8, got 71"):
        look(raw.slice(1), {"encoding": "rgb8", "width": 6, "height": 4})
    with pytest.raises(tc.DecodeError, match=r"^metadata.width: expected a positive integer, got '6'"):
        look(raw, {"encoding": "rgb8", "width": "6", "height": 4})
    with pytest.raises(tc.DecodeError, match=r"^metadata.height: expected a positive integer, got -4"):
        look(raw, {"encoding": "bgr8", "width": 6, "height": -4})
    with pytest.raises(tc.DecodeError, match=r"^metadata.encoding: expected an encoding name"):
        look(raw, {"encoding": 3})
    with pytest.raises(tc.DecodeError, match=r"^value: expected flat uint8 bytes"):
        look(pa.array([1.0]), {"encoding": "jpeg"})
    assert "does not check" in look(raw, {"encoding": "yuv420", "width": 6, "height": 4}).what


def test_plain_arrow_values_show_type_and_length():
    seen = look(pa.array([1, 2, 3], pa.int64()), {"seq": 1})
    assert (seen.kind, seen.what, seen.nbytes) == ("arrow", "int64 x 3", 24)
    assert look(pa.array(["a", "bc"]), {}).what == "string x 2"
    assert look(pa.array([], pa.null()), {}).what == "null x 0"
    wide = pa.array([{f"field_{i}": i for i in range(40)}])
    assert len(look(wide, {}).what) < 80
    with pytest.raises(tc.DecodeError, match=r"^value: expected a pyarrow.Array, got bytes"):
        look(b"raw", {})


# ------------------------------------------------------------------------------ rates, lines, summary


class Clocks:
    def __init__(self):
        self.now = 100.0
        self.wall = 1_700_000_000_000_000_000

    def monotonic(self) -> float:
        return self.now

    def wall_ns(self) -> int:
        return self.wall


def monitor(clocks, inputs=("frames", "tensors"), **kw) -> Monitor:
    return Monitor(set(inputs), clock=clocks.monotonic, wall_ns=clocks.wall_ns, **kw)


def test_rates_bandwidth_and_latency_of_one_window_from_fake_clocks():
    clocks = Clocks()
    m = monitor(clocks)
    value, metadata = tc.encode(tv_tensors.Image(torch.zeros(3, 4, 5, dtype=torch.uint8)))
    for i in range(10):  # 10 frames in 2 s, sent 1, 2, ... 10 ms before they arrive
        clocks.now += 0.2
        m.handle("frames", value, {**metadata, "sent_ns": clocks.wall - (i + 1) * 1_000_000})
    assert m.report() == [
        "monitor: frames | 5.0 msg/s | 300 B/s | latency p50 5.0 ms, max 10.0 ms | tc host | Image uint8[3, 4, 5]"
    ]
    clocks.now += 1.0
    assert m.report() == []  # quiet: nothing came in that window
    clocks.now += 0.5
    m.handle("tensors", pa.array([1, 2], pa.int32()), {})
    m.handle("tensors", pa.array([1.0], pa.float32()), {"sent_ns": "soon"})  # no latency from that
    clocks.now += 0.5
    assert m.report() == ["monitor: tensors | 2.0 msg/s | 12 B/s | latency - | arrow | float x 1"]


def test_bad_messages_are_refused_counted_and_shown_in_the_line_and_the_summary(caplog):
    clocks = Clocks()
    refusals = Refusals(logging.getLogger("t"), clock=clocks.monotonic)
    m = monitor(clocks, refusals=refusals)
    value, metadata = tc.encode(torch.zeros(4))
    m.handle("tensors", value, metadata)
    with caplog.at_level(logging.ERROR):
        for _ in range(30):  # a flood of bad ones: the first few logged, the rest only counted
            m.handle("tensors", value, {**metadata, "tc.header": "{"})
    assert refusals.counts == {"tensors: bad message": 30}
    assert len([r for r in caplog.records if "refused tensors: bad message" in r.getMessage()]) == 10
    clocks.now += 1.0
    (line,) = m.report()
    assert line.startswith("monitor: tensors | 31.0 msg/s |") and line.endswith(
        "| tc host | Tensor float32[4] | 30 bad"
    )
    summary = m.summary().splitlines()
    assert summary[0] == "monitor summary: 2 inputs"
    assert summary[1].split() == [
        "input",
        "messages",
        "bad",
        "bytes",
        "GPU",
        "bytes",
        "msg/s",
        "p50",
        "ms",
        "p99",
        "ms",
        "kinds",
    ]
    rows = {line.split()[0]: line.split() for line in summary[2:4]}
    assert rows["tensors"][:3] == ["tensors", "31", "30"] and rows["tensors"][-2:] == ["tc", "host"]
    assert rows["frames"][:3] == ["frames", "0", "0"]
    assert "  tensors: last tc host: Tensor float32[4]" in summary
    assert "  frames: nothing received" in summary


def test_summary_mean_rate_latency_percentiles_and_kinds():
    clocks = Clocks()
    m = monitor(clocks, inputs=("mixed",))
    image = pa.array(bytes(12), pa.uint8())
    for i in range(5):  # two messages at each of 100.0, 100.25, ... 101.0 s
        m.handle("mixed", image, {"encoding": "mono8", "width": 4, "height": 3, "sent_ns": clocks.wall - 2_000_000})
        m.handle("mixed", pa.array([i]), {})
        clocks.now += 0.25
    summary = m.summary()
    row = summary.splitlines()[2].split()
    assert row[:6] == ["mixed", "10", "0", "100", "B", "-"]  # 5 x 12 bytes + 5 x 8 bytes, none on a GPU
    assert row[6] == "9.0"  # 9 intervals in the 1.0 s from the first message to the last
    assert row[7:9] == ["2.0", "2.0"]  # p50, p99 ms
    assert summary.splitlines()[2].endswith("dora image, arrow")
    assert "(latency: from the sender's sent_ns" in summary


def test_byte_units():
    assert [fmt_bytes(n) for n in (0, 999, 1000, 27_600_000, 3e9)] == ["0 B", "999 B", "1.0 kB", "27.6 MB", "3.0 GB"]


# ------------------------------------------------------------------------------ the node on its loop


def test_the_node_reports_each_input_and_its_summary_then_exits_0(capsys):
    value, metadata = tc.encode(
        {"boxes": tv_tensors.BoundingBoxes(torch.zeros(2, 4), format="XYXY", canvas_size=(8, 9))}
    )
    events = [{"type": "INPUT", "id": "det", "value": value, "metadata": metadata}] * 3
    events += [
        {
            "type": "INPUT",
            "id": "raw",
            "value": pa.array(bytes(12), pa.uint8()),
            "metadata": {"encoding": "mono8", "width": 4, "height": 3},
        }
    ]
    events += [{"type": "INPUT", "id": "det", "value": value, "metadata": {"tc.header": "{"}}, None]
    node = FakeNode(events, inputs=["det", "raw"])
    logic = MonitorNode(load_config({"PERIOD_S": "0"}), None, logging.getLogger("monitor-test"))
    logic.start(Link.of(node))
    EventLoop(Link.of(node), logic, logic.log).run()
    assert logic.finish() == EXIT_OK and logic.refusals.unexpected == 0
    out = capsys.readouterr().out
    assert (
        "det" in out
        and "  det: last tc host: {boxes: BoundingBoxes float32[2, 4] format=XYXY canvas_size=(8, 9)}" in out
    )
    assert "  raw: last dora image: mono8 4x3" in out
    assert logic.refusals.counts == {"det: bad message": 1}
    assert not node.sent  # an observer: it sends nothing, acknowledges nothing


def test_echo_prints_one_line_per_good_message(capsys):
    value, metadata = tc.encode([torch.zeros(2, dtype=torch.int16)])
    events = [("a", pa.array([1, 2, 3])), {"type": "INPUT", "id": "b", "value": value, "metadata": metadata}]
    events += [{"type": "INPUT", "id": "b", "value": value, "metadata": {**metadata, "tc.version": 1}}, None]
    node = FakeNode(events, inputs=["a", "b"])
    logic = MonitorNode(load_config({"PERIOD_S": "0", "ECHO": "1"}), None, logging.getLogger("monitor-test"))
    logic.start(Link.of(node))
    EventLoop(Link.of(node), logic, logic.log).run()
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["monitor: a: arrow: int64 x 3", "monitor: b: tc host: [Tensor int16[2]]"]


def test_the_node_wakes_up_for_its_period_and_stays_quiet_without_one():
    node = FakeNode([None], inputs=["a"])
    logic = MonitorNode(load_config({"PERIOD_S": "2"}), None, logging.getLogger("monitor-test"))
    logic.start(Link.of(node))
    assert 1.5 < logic.wait() <= 2.0
    logic = MonitorNode(load_config({}), None, logging.getLogger("monitor-test"))
    logic.start(Link.of(node))
    assert 0.5 < logic.wait() <= 1.0  # PERIOD_S defaults to 1 s
    logic = MonitorNode(load_config({"PERIOD_S": "0"}), None, logging.getLogger("monitor-test"))
    logic.start(Link.of(node))
    assert logic.wait() is None


@pytest.mark.parametrize(
    "env, message",
    [
        ({"PERIOD_S": "0.01"}, r"PERIOD_S: expected 0 \(only the summary\) or at least 0.1 seconds, got 0.01"),
        ({"PERIOD_S": "-1"}, r"PERIOD_S: expected a number from 0 to 3600, got '-1'"),
        ({"PERIOD_S": "often"}, r"PERIOD_S: expected a number from 0 to 3600, got 'often'"),
        ({"MAX_SHOWN": "0"}, r"MAX_SHOWN: expected an integer from 1 to 64, got 0"),
        ({"MAX_DEPTH": "deep"}, r"MAX_DEPTH: expected an integer from 1 to 16, got 'deep'"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(env, message):
    with pytest.raises(SettingError, match=message):
        load_config(env)


# ------------------------------------------------------------------------------ CUDA IPC, passed over


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """The CPU stand-in for CUDA IPC (as tests/ipc/conftest.py): this process is producer and receiver."""
    yield from installed(monkeypatch, tmp_path)


def bytes_in_flight() -> int:
    state = cuda_ipc._get_state()
    state.producer.collect()
    return state.producer.output(ENCODE_OUTPUT).live_bytes


def test_a_cuda_ipc_message_is_described_and_released_at_once_without_a_copy(fake):
    obj = {"image": tv_tensors.Image(torch.zeros(3, 16, 16, dtype=torch.uint8)), "scores": torch.zeros(100)}
    value, metadata = tc.encode(obj, transport="cuda-ipc")
    held = bytes_in_flight()
    assert held > 0 and len(value) == 0
    m = Monitor({"t"}, pass_ipc=pass_ipc)
    seen = m.handle("t", value, metadata)
    assert seen.kind == "tc cuda-ipc" and seen.nbytes == 0 and seen.gpu_bytes == held
    assert seen.what == (
        "{image: Image uint8[3, 16, 16], scores: Tensor float32[100]} on GPU-00000000-1111-2222-3333-444444444444"
    )
    assert bytes_in_flight() == 0  # the producer may reuse its memory now, not after the claim timeout
    receiver = cuda_ipc._get_state().receiver.stats()
    assert receiver["passed_unread"] == 1 and receiver["pending_release"] == 0
    # Nothing opened, mapped, waited on or viewed: no GPU memory reached this process, nor the host.
    assert not fake.opened
    assert {"open_segment", "open_event", "wait", "message_view", "record_marker"}.isdisjoint(fake.ops)
    (line,) = m.report(m.clock() + 1.0)
    assert "/s on GPU | latency - | tc cuda-ipc | {image: Image" in line


def test_without_taking_part_the_producer_holds_the_memory_until_the_claim_timeout(fake):
    """What the monitor would cost its producer if it only looked at the header."""
    value, metadata = tc.encode(torch.zeros(64), transport="cuda-ipc")
    Monitor({"t"}, pass_ipc=None).handle("t", value, metadata)
    assert bytes_in_flight() > 0


def test_a_cuda_ipc_message_that_cannot_be_claimed_is_a_bad_message(fake):
    value, metadata = tc.encode(torch.zeros(64), transport="cuda-ipc")
    m = Monitor({"t"}, pass_ipc=pass_ipc)
    assert m.handle("t", value, {**metadata, "tc.ipc.generation": metadata["tc.ipc.generation"] + 1}) is None
    assert m.refusals.counts == {"t: bad message": 1} and m.inputs["t"].bad == 1
    assert m.handle("t", value, metadata) is not None  # the message itself still is
    assert bytes_in_flight() == 0  # given back: the producer collected its slot
    # A copy of it that comes again (any node may forward one): the monitor passed it already,
    # so it takes no part again and counts it as a message, not a bad one.
    assert m.handle("t", value, metadata) is not None
    assert m.inputs["t"].bad == 1 and m.inputs["t"].messages == 3


def test_a_message_shown_twice_to_the_monitor_still_reaches_its_receiver(fake):
    """The monitor and a receiver wired to one output: the monitor, shown the message twice (a
    node forwarded a copy to it), takes part once, so the producer waits for the receiver, whose
    claim then succeeds."""
    node = FakeNode(
        node_id="cam",
        descriptor={
            "nodes": [
                {"id": "cam", "outputs": ["image"]},
                {"id": "monitor", "inputs": {"t": "cam/image", "copies": "relay/out"}},
                {"id": "receiver", "inputs": {"x": "cam/image"}},
            ]
        },
    )
    tc.send(node, "image", torch.zeros(64), transport="cuda-ipc")
    (_, value, metadata) = node.sent[-1]
    m = Monitor({"t", "copies"}, pass_ipc=pass_ipc)
    assert m.handle("t", value, metadata) is not None
    assert m.handle("copies", value, metadata) is not None
    assert (m.inputs["copies"].messages, m.inputs["copies"].bad) == (1, 0)
    state = cuda_ipc._get_state()
    state.producer.collect()
    assert state.producer.in_flight() == 1  # still the receiver's to claim
    claim_and_release_elsewhere(slot_of(metadata))  # the receiver
    assert tc.ipc_flush(timeout_s=10)
