"""Which transport an output's messages take, from where the dataflow places its consumers.

dora hands every node the whole dataflow (`node.dataflow_descriptor()`): each node's inputs and
its `deploy: {machine: ...}`. A daemon started with `--machine-id X` sets ``DORA_MACHINE_ID=X``
in the nodes it spawns; nodes without `deploy:` run on the daemon started without a machine id
(and under `dora run`, which refuses `deploy:`, everything is one process tree on one machine).

The rule (`choose`), for ``transport="auto"``:

* CUDA IPC only when the message holds a CUDA tensor **and** every consumer of the output is
  known to run on this node's machine (same machine id) **and** there are at most 16 of them
  (what one ledger slot tracks).
* Host bytes otherwise: no CUDA tensor, a consumer on another machine, a consumer whose
  placement cannot be known (label-scheduled, dynamic, or no readable descriptor), no consumer.

One dora message reaches every consumer of an output, so an output with consumers on both
sides gets host bytes for all of them: the one form every consumer can read. To give the local
consumers CUDA IPC anyway, send the same object on two outputs (one wired to local consumers,
one to remote ones); each output is routed on its own.

``TC_TRANSPORT=host|cuda-ipc|auto`` in a node's environment forces the transport of every
``transport="auto"`` send of that node (the env: block of the node in the dataflow YAML).

A message with no CUDA tensor at all goes as host bytes even where ``cuda-ipc`` was asked for
(explicitly, or forced by ``TC_TRANSPORT``): there is no GPU memory to share, and a stream that
mixes such messages in (an empty dict, a structure of plain values) must not lose them. The
choice is logged once per output, like every automatic one (`resolve`).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

from .errors import EncodeError

__all__ = [
    "ENV_TRANSPORT",
    "MAX_IPC_CONSUMERS",
    "Consumer",
    "OutputRoute",
    "route_of",
    "route_from_descriptor",
    "choose",
    "resolve",
    "forced_transport",
    "this_node_id",
]

log = logging.getLogger("tensor_codec")

ENV_TRANSPORT = "TC_TRANSPORT"
MAX_IPC_CONSUMERS = 16  # receivers one CUDA IPC ledger slot tracks
_CHOICES = ("auto", "host", "cuda-ipc")


@dataclass(frozen=True)
class Consumer:
    node: str
    input: str
    machine: str | None  # None: the daemon without a machine id (or `dora run`)
    unknown: str | None = None  # why its placement cannot be known, if it cannot


@dataclass(frozen=True)
class OutputRoute:
    """Where an output's consumers run, as far as the dataflow says."""

    output: str
    node: str | None  # this node's id
    machine: str | None  # this node's machine id
    consumers: tuple[Consumer, ...]
    unknown: str | None = None  # why nothing can be said (no descriptor, no node id)

    def remote(self) -> list[Consumer]:
        return [c for c in self.consumers if c.unknown is None and c.machine != self.machine]

    def unplaced(self) -> list[Consumer]:
        return [c for c in self.consumers if c.unknown is not None]

    def describe(self) -> str:
        if self.unknown:
            return f"output '{self.output}': placement unknown ({self.unknown})"
        here = _machine_name(self.machine)
        parts = []
        for c in self.consumers:
            where = f"unknown ({c.unknown})" if c.unknown else _machine_name(c.machine)
            parts.append(f"{c.node}/{c.input} on {where}")
        return f"output '{self.output}' of {self.node} on {here}: " + (", ".join(parts) if parts else "no consumers")


def _machine_name(machine: str | None) -> str:
    return f"machine {machine!r}" if machine is not None else "the default machine"


def _clean_machine(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def this_node_id(node: Any) -> str | None:
    """This node's id: from `node.node_config()` where dora puts it, else from the
    ``DORA_NODE_CONFIG`` the daemon hands the process."""
    try:
        config = node.node_config()
        if isinstance(config, dict) and isinstance(config.get("node_id"), str):
            return config["node_id"]
    except Exception:
        pass
    match = re.search(r"^node_id:\s*(\S+)", os.environ.get("DORA_NODE_CONFIG", ""), re.MULTILINE)
    return match.group(1) if match else None


def _placement(entry: dict, default_deploy: Any) -> tuple[str | None, str | None]:
    """-> (machine, why unknown) of one node entry of the descriptor."""
    if entry.get("path") == "dynamic":
        return None, "a dynamic node, started by hand anywhere"
    deploy = entry.get("deploy")
    if not isinstance(deploy, dict):
        deploy = default_deploy if isinstance(default_deploy, dict) else {}
    machine = _clean_machine(deploy.get("machine"))
    if machine is None and deploy.get("labels"):
        return None, "placed by labels at start time"
    return machine, None


def route_from_descriptor(descriptor: Any, node_id: str | None, output_id: str, machine: str | None) -> OutputRoute:
    """The consumers of `node_id`/`output_id` in a dataflow descriptor, each with its machine
    (pure: the unit tests drive it with descriptor variants)."""
    machine = _clean_machine(machine)
    if node_id is None:
        return OutputRoute(output_id, None, machine, (), "this node's id is not known")
    if not isinstance(descriptor, dict) or not isinstance(descriptor.get("nodes"), list):
        return OutputRoute(output_id, node_id, machine, (), "no dataflow descriptor")
    default_deploy = descriptor.get("deploy")
    wanted = f"{node_id}/{output_id}"
    consumers = []
    for entry in descriptor["nodes"]:
        if not isinstance(entry, dict):
            continue
        inputs = entry.get("inputs")
        if not isinstance(inputs, dict):
            continue
        for input_id, source in inputs.items():
            if isinstance(source, dict):
                source = source.get("source")
            if source != wanted:
                continue
            where, unknown = _placement(entry, default_deploy)
            consumers.append(Consumer(str(entry.get("id")), str(input_id), where, unknown))
    return OutputRoute(output_id, node_id, machine, tuple(consumers))


_routes: dict[tuple[int, str], OutputRoute] = {}


def route_of(node: Any, output_id: str) -> OutputRoute:
    """Where the consumers of this node's `output_id` run; read once per node and output (a
    dataflow's placement does not change while it runs). Keyed by id(node): dora's Node takes
    neither weak references nor attributes."""
    key = (id(node), output_id)
    route = _routes.get(key)
    if route is None:
        try:
            descriptor = node.dataflow_descriptor()
        except Exception as e:
            descriptor = None
            log.debug("dataflow_descriptor() failed: %s", e)
        route = route_from_descriptor(descriptor, this_node_id(node), output_id, os.environ.get("DORA_MACHINE_ID"))
        if len(_routes) < 4096:
            _routes[key] = route
    return route


def forced_transport(explicit: str) -> str:
    """The transport a send asked for, with ``TC_TRANSPORT`` applied to ``"auto"``."""
    if explicit != "auto":
        return explicit
    env = os.environ.get(ENV_TRANSPORT, "").strip()
    if not env:
        return "auto"
    if env not in _CHOICES:
        raise EncodeError(f"{ENV_TRANSPORT}: expected one of {list(_CHOICES)}, got {env!r}")
    return env


NO_CUDA = "no CUDA tensor in the message"
_announced: set[tuple] = set()


def resolve(requested: str, has_cuda: bool, route: Callable[[], OutputRoute], *, key: Any, output: str) -> tuple[str, str]:
    """-> (transport, why) of one message: `requested` (``auto``/``host``/``cuda-ipc``, explicit in
    the code) with ``TC_TRANSPORT`` applied to ``auto``, the rule of `choose` for ``auto``, and host
    bytes for a ``cuda-ipc`` message without a CUDA tensor. `route` is asked only for ``auto``.
    Choices the code did not name itself are logged once per (`key`, `output`, transport, reason)."""
    name = forced_transport(requested)
    if name == "cuda-ipc" and not has_cuda:
        name, why = "host", f"{NO_CUDA}: cuda-ipc shares GPU memory, so host bytes carry it"
    elif name == "auto":
        name, why = choose(route(), has_cuda)
    elif name != requested:
        return name, f"forced by {ENV_TRANSPORT}={name}"
    else:
        return name, "asked for by the code"
    announce(key, output, name, why)
    return name, why


def announce(key: Any, output: str, name: str, why: str) -> None:
    entry = (key, output, name, why)
    if entry not in _announced and len(_announced) < 4096:
        # Once per output, choice and reason (a handful per output): what a user needs to see
        # when a deployment changes it.
        _announced.add(entry)
        log.info("output '%s': transport %s (%s)", output, name, why)


def choose(route: OutputRoute, has_cuda: bool) -> tuple[str, str]:
    """-> (transport, why) for a message of this output (see the module's rule)."""
    if not has_cuda:
        return "host", NO_CUDA
    if route.unknown:
        return "host", f"consumers' placement unknown: {route.unknown}"
    if not route.consumers:
        return "host", "no consumer is wired to the output"
    unplaced = route.unplaced()
    if unplaced:
        c = unplaced[0]
        return "host", f"consumer {c.node}/{c.input}: placement unknown ({c.unknown})"
    remote = route.remote()
    if remote:
        c = remote[0]
        return "host", (
            f"consumer {c.node}/{c.input} runs on {_machine_name(c.machine)}, this node on "
            f"{_machine_name(route.machine)}: CUDA IPC cannot cross machines"
        )
    if len(route.consumers) > MAX_IPC_CONSUMERS:
        return "host", f"{len(route.consumers)} consumers, CUDA IPC tracks at most {MAX_IPC_CONSUMERS}"
    return "cuda-ipc", f"all {len(route.consumers)} consumer(s) on this machine and the data on a GPU"
