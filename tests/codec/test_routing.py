"""The transport choice of `tc.send(..., transport="auto")` over dataflow descriptor variants:
same machine, other machine, mixed consumers, no deploy information, placement unknown, and a
transport forced by TC_TRANSPORT. The descriptors have the shape dora 1.1's
`node.dataflow_descriptor()` returns (checked against a real two-daemon run: each node has
`deploy: {machine, working_dir, distribute}` or null, and the top level has `deploy`)."""

from __future__ import annotations

import logging

import pytest
import torch
from torchvision import tv_tensors

import tensor_codec as tc
from tensor_codec import routing
from tensor_codec.dora import Link
from tensor_codec.dora.descriptor import route_from_descriptor
from tensor_codec.errors import EncodeError
from tests.support.fakes import FakeNode


def entry(node_id, *, machine=None, inputs=None, outputs=None, path="tc-tensor-receiver", labels=None):
    deploy = None
    if machine is not None or labels is not None:
        deploy = {"machine": machine, "working_dir": None, "distribute": "local"}
        if labels:
            deploy["labels"] = labels
    return {"id": node_id, "path": path, "inputs": inputs or {}, "outputs": outputs or [], "deploy": deploy}


def descriptor(*nodes, deploy=None):
    return {"nodes": list(nodes), "deploy": deploy, "debug": {"enable_debug_inspection": False}}


SENDER = entry("sender", machine="A", outputs=["out", "other"])


def decide(desc, machine="A", has_cuda=True, output="out", node_id="sender"):
    return routing.choose(route_from_descriptor(desc, node_id, output, machine), has_cuda)


def test_every_consumer_on_this_machine_gets_cuda_ipc():
    desc = descriptor(
        SENDER,
        entry("a1", machine="A", inputs={"x": "sender/out"}),
        entry("a2", machine="A", inputs={"y": {"source": "sender/out", "queue_size": 4}}),
    )
    name, why = decide(desc)
    assert name == "cuda-ipc", why
    assert "2 consumer(s)" in why


def test_a_consumer_on_another_machine_gets_host_bytes():
    desc = descriptor(SENDER, entry("b", machine="B", inputs={"x": "sender/out"}))
    name, why = decide(desc)
    assert name == "host"
    assert "b/x runs on machine 'B'" in why and "machine 'A'" in why


def test_mixed_consumers_all_get_host_bytes():
    # One dora message reaches every consumer: the only form all of them can read.
    desc = descriptor(
        SENDER,
        entry("a", machine="A", inputs={"x": "sender/out"}),
        entry("b", machine="B", inputs={"x": "sender/out"}),
    )
    assert decide(desc)[0] == "host"


def test_outputs_are_routed_on_their_own():
    desc = descriptor(
        SENDER,
        entry("a", machine="A", inputs={"x": "sender/out"}),
        entry("b", machine="B", inputs={"x": "sender/other"}),
    )
    assert decide(desc, output="out")[0] == "cuda-ipc"
    assert decide(desc, output="other")[0] == "host"


def test_no_deploy_information_means_one_machine():
    # `dora run`, or `dora start` with one daemon: no deploy keys, no DORA_MACHINE_ID.
    desc = descriptor(
        entry("sender", outputs=["out"]),
        entry("r", inputs={"x": "sender/out"}),
    )
    assert decide(desc, machine=None)[0] == "cuda-ipc"
    # An empty DORA_MACHINE_ID is no machine id.
    assert decide(desc, machine="")[0] == "cuda-ipc"


def test_a_consumer_without_deploy_runs_on_the_default_daemon_not_ours():
    desc = descriptor(SENDER, entry("r", inputs={"x": "sender/out"}))
    name, why = decide(desc, machine="A")
    assert name == "host" and "the default machine" in why


def test_the_top_level_deploy_is_every_node_default():
    desc = descriptor(
        entry("sender", outputs=["out"]),
        entry("r", inputs={"x": "sender/out"}),
        entry("s", machine="B", inputs={"x": "sender/out"}),
        deploy={"machine": "A"},
    )
    route = route_from_descriptor(desc, "sender", "out", "A")
    assert [(c.node, c.machine) for c in route.consumers] == [("r", "A"), ("s", "B")]
    assert routing.choose(route, True)[0] == "host"


@pytest.mark.parametrize(
    "consumer, reason",
    [
        (entry("r", labels={"gpu": "true"}, inputs={"x": "sender/out"}), "labels"),
        (entry("r", path="dynamic", inputs={"x": "sender/out"}), "dynamic"),
    ],
)
def test_placement_unknown_gets_host_bytes(consumer, reason):
    name, why = decide(descriptor(SENDER, consumer))
    assert name == "host" and reason in why


@pytest.mark.parametrize("desc", [None, {}, {"nodes": "x"}, "garbage"])
def test_no_readable_descriptor_gets_host_bytes(desc):
    name, why = decide(desc)
    assert name == "host" and "no dataflow descriptor" in why


def test_unknown_node_id_gets_host_bytes():
    desc = descriptor(SENDER, entry("a", machine="A", inputs={"x": "sender/out"}))
    name, why = decide(desc, node_id=None)
    assert name == "host" and "id is not known" in why


def test_no_consumer_and_cpu_data_get_host_bytes():
    desc = descriptor(SENDER, entry("a", machine="A", inputs={"x": "sender/out"}))
    assert decide(desc, output="other") == ("host", "no consumer is wired to the output")
    assert decide(desc, has_cuda=False) == ("host", "no CUDA tensor in the message")


def test_more_consumers_than_a_ledger_slot_tracks_get_host_bytes():
    consumers = [entry(f"r{i}", machine="A", inputs={"x": "sender/out"}) for i in range(routing.MAX_IPC_CONSUMERS + 1)]
    name, why = decide(descriptor(SENDER, *consumers))
    assert name == "host" and "at most 16" in why


# ------------------------------------------------------------------------------ forced transport


def test_tc_transport_forces_every_auto_send(monkeypatch):
    desc = descriptor(SENDER, entry("b", machine="B", inputs={"x": "sender/out"}))
    node = FakeNode(node_id="sender", descriptor=desc)
    monkeypatch.setenv("DORA_MACHINE_ID", "A")
    monkeypatch.setenv(routing.ENV_TRANSPORT, "cuda-ipc")
    # Forced cuda-ipc, but nothing on a GPU to share: host bytes, and the reason says so.
    assert tc.transport_for(node, "out", torch.zeros(3)) == (
        "host",
        "no CUDA tensor in the message: cuda-ipc shares GPU memory, so host bytes carry it",
    )
    monkeypatch.setenv(routing.ENV_TRANSPORT, "host")
    assert tc.transport_for(node, "out", torch.zeros(3))[0] == "host"
    # An explicit transport in the code wins over the environment.
    assert routing.forced_transport("host") == "host"
    monkeypatch.setenv(routing.ENV_TRANSPORT, "auto")
    assert routing.forced_transport("auto") == "auto"


def test_a_bad_tc_transport_is_named(monkeypatch):
    monkeypatch.setenv(routing.ENV_TRANSPORT, "rdma")
    with pytest.raises(EncodeError, match=r"TC_TRANSPORT: expected one of \['auto', 'host', 'cuda-ipc'\], got 'rdma'"):
        tc.send(FakeNode(node_id="sender"), "out", torch.zeros(3))


def test_a_bad_transport_argument_is_named():
    with pytest.raises(EncodeError, match="expected one of \\['auto', 'host', 'cuda-ipc'\\], got 'tcp'"):
        tc.send(FakeNode(node_id="sender"), "out", torch.zeros(3), transport="tcp")


def test_auto_reads_the_machine_id_and_logs_the_choice_once(monkeypatch, caplog):
    desc = descriptor(SENDER, entry("b", machine="B", inputs={"x": "sender/out"}))
    node = FakeNode(node_id="sender", descriptor=desc)
    monkeypatch.setenv("DORA_MACHINE_ID", "A")
    monkeypatch.delenv(routing.ENV_TRANSPORT, raising=False)
    image = tv_tensors.Image(torch.zeros(3, 4, 4, dtype=torch.uint8))
    with caplog.at_level(logging.INFO, logger="tensor_codec"):
        assert tc.transport_for(node, "out", image)[0] == "host"
        assert tc.transport_for(node, "out", image)[0] == "host"
    announced = [r.getMessage() for r in caplog.records if "transport host" in r.getMessage()]
    assert announced == ["output 'out': transport host (no CUDA tensor in the message)"]


def test_the_route_is_read_once_per_node_and_output(monkeypatch):
    calls = []

    class Counting(FakeNode):
        def dataflow_descriptor(self):
            calls.append(1)
            return super().dataflow_descriptor()

    node = Counting(
        node_id="sender", descriptor=descriptor(SENDER, entry("a", machine="A", inputs={"x": "sender/out"}))
    )
    monkeypatch.setenv("DORA_MACHINE_ID", "A")
    for _ in range(3):
        route = Link.of(node).route("out")
    assert len(calls) == 1
    assert route.machine == "A" and [c.node for c in route.consumers] == ["a"]


def test_the_node_id_falls_back_to_dora_node_config(monkeypatch):
    no_id = FakeNode(outputs=["out"])
    assert no_id.node_config() == {"inputs": {}, "outputs": ["out"]}  # what dora 1.1 returns
    monkeypatch.setenv("DORA_NODE_CONFIG", "dataflow_id: x\nnode_id: sender\nrun_config: {}\n")
    assert Link(no_id).node_id == "sender"
    monkeypatch.delenv("DORA_NODE_CONFIG")
    assert Link(no_id).node_id is None


@pytest.mark.gpu
def test_auto_on_a_gpu_picks_cuda_ipc_for_local_consumers_only(monkeypatch):
    desc = descriptor(
        SENDER,
        entry("a", machine="A", inputs={"x": "sender/out"}),
        entry("b", machine="B", inputs={"x": "sender/other"}),
    )
    node = FakeNode(node_id="sender", descriptor=desc)
    monkeypatch.setenv("DORA_MACHINE_ID", "A")
    monkeypatch.delenv(routing.ENV_TRANSPORT, raising=False)
    data = {"image": tv_tensors.Image(torch.zeros(3, 8, 8, device="cuda")), "n": torch.arange(3)}
    assert tc.transport_for(node, "out", data)[0] == "cuda-ipc"
    assert tc.transport_for(node, "other", data)[0] == "host"


def test_dora_refusing_a_big_message_to_another_machine_is_explained(monkeypatch):
    node = FakeNode(
        node_id="sender",
        pool=512 << 20,
        descriptor=descriptor(SENDER, entry("b", machine="B", inputs={"x": "sender/out"})),
        fail='internal error: output error: output "out": IPC-encoded message is 75497800 bytes, exceeding the '
        "67108864-byte daemon transport limit (the output is on the daemon path)",
    )
    monkeypatch.setenv("DORA_MACHINE_ID", "A")
    with pytest.raises(tc.MessageTooLargeError) as info:
        tc.send(node, "out", torch.zeros(1 << 20))
    text = str(info.value)
    assert "consumers on other machines (b on machine 'B')" in text
    assert "relays it through its daemons" in text and "--zenoh-listen" in text


@pytest.mark.parametrize(
    "queue_size, policy, capacity",
    [
        (None, None, 10),  # dora's defaults: queue_size 10, drop_oldest
        (4, None, 4),
        (4, "drop_oldest", 4),
        (0, None, 1),  # dora keeps the latest one
        (None, "backpressure", 100),  # 10 x 10
        (4, "backpressure", 100),  # at least 100
        (64, "backpressure", 640),
        ("12", None, 10),  # not dora's: its default is the best guess
    ],
)
def test_an_inputs_queue_holds_what_dora_1_1_lets_it(queue_size, policy, capacity):
    assert routing.queue_capacity(queue_size, policy) == capacity
    assert routing.Consumer("r", "x", None, queue_size=queue_size, queue_policy=policy).capacity == capacity


def test_the_route_reads_each_consumers_queue_size_and_policy():
    desc = descriptor(
        SENDER,
        entry("a", inputs={"x": "sender/out", "y": {"source": "sender/out", "queue_size": 4}}),
        entry("b", inputs={"z": {"source": "sender/out", "queue_size": 7, "queue_policy": "backpressure"}}),
        entry("c", inputs={"w": {"source": "sender/out", "queue_policy": "drop_oldest", "queue_size": "x"}}),
    )
    route = route_from_descriptor(desc, "sender", "out", None)
    queues = [(c.node, c.input, c.queue_size, c.queue_policy, c.capacity) for c in route.consumers]
    assert queues == [
        ("a", "x", None, None, 10),
        ("a", "y", 4, None, 4),
        ("b", "z", 7, "backpressure", 100),
        ("c", "w", None, "drop_oldest", 10),
    ]
    assert (
        route.consumers[0].describe_queue()
        == "queue_size 10 (dora's default), queue_policy drop_oldest (dora's default)"
    )
    assert route.consumers[2].describe_queue() == "queue_size 7, queue_policy backpressure"
