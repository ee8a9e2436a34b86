"""Everything the codec knows about dora, in one place.

The rest of the package never calls dora: transports lay a message out and write its bytes into
a destination they are given (transports/base.py); this module gives them dora's send buffer,
and reads what dora hands a node. What lives here:

* the node's own description: its config (`node_config`), its id (`node_id`, from dora or
  ``DORA_NODE_CONFIG``), its machine (``DORA_MACHINE_ID``), and the dataflow descriptor, read
  into an `OutputRoute` per output (`route_of`; the rule that picks a transport from it is
  routing.py's);
* what a dora route can carry: the shared-memory pool (``shared_memory_pool_size``, else
  ``DORA_NODE_SHM_POOL_SIZE``, else 8 MiB) and the daemon path's 64 MiB limit, checked before
  sending (`check_route`), dora's own size errors translated (`size_error`);
* sending: `send` (a codec message, written straight into ``send_output_raw``'s buffer),
  `send_plain` (flat bytes for nodes that do not speak the codec), `transport_for`;
* receiving: `receive` (an INPUT event).

dora 1.1 publishes an output through the node's shared-memory pool when the message fits in it.
A bigger message falls back to the daemon path, which is slow (measured: 16 MB took ~95 ms
instead of ~2 ms) and refuses messages whose encoded size passes 64 MiB; the encoding adds 1/8,
so payloads over about 59.6 MiB fail there with "exceeding the 67108864-byte daemon transport
limit". `check_route` raises `MessageTooLargeError` for those before anything is written and
warns once per output for the slow case; both name ``shared_memory_pool_size`` and the size.

Placement (`route_of`): dora hands every node the whole dataflow (`node.dataflow_descriptor()`):
each node's inputs and its ``deploy: {machine: ...}``. A daemon started with ``--machine-id X``
sets ``DORA_MACHINE_ID=X`` in the nodes it spawns; nodes without ``deploy:`` run on the daemon
started without a machine id (and under `dora run`, which refuses ``deploy:``, everything is one
process tree on one machine).
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from . import routing
from .codec import decode
from .errors import DecodeError, EncodeError, MessageTooLargeError
from .layout import Destination, values_of
from .plan import make_plan
from .routing import Consumer, OutputRoute
from .transports import Output, get_transport
from .transports.names import CHOICES as TRANSPORT_CHOICES
from .wire import RESERVED_PREFIX

__all__ = [
    "send",
    "receive",
    "transport_for",
    "send_plain",
    "node_config",
    "node_id",
    "machine_id",
    "route_of",
    "route_from_descriptor",
    "expected_receivers",
    "pool_size",
    "check_route",
    "suggested_pool",
    "size_error",
    "DORA_IMAGE_KEYS",
    "DEFAULT_POOL_BYTES",
    "DAEMON_PATH_MAX_PAYLOAD",
]

log = logging.getLogger("tensor_codec")

# dora's image convention (flat uint8 bytes described by these keys): a dora-hub node takes any
# message carrying them as such an image, so tc.send refuses them (tc.send_plain is for that).
DORA_IMAGE_KEYS = ("encoding", "width", "height")

DEFAULT_POOL_BYTES = 8 << 20
DAEMON_LIMIT_BYTES = 64 << 20
# Encoded size on the daemon path is 9/8 of the payload plus framing; keep 64 KiB of margin.
DAEMON_PATH_MAX_PAYLOAD = DAEMON_LIMIT_BYTES * 8 // 9 - (64 << 10)

_EMPTY = pa.array([], type=pa.uint8())


# ---------------------------------------------------------------------------- the node itself


def node_config(node: Any) -> dict:
    """The node's config as dora gives it (inputs, outputs, pool size, id); {} from a test
    double or an older dora without it."""
    try:
        config = node.node_config()
    except Exception:
        return {}
    return config if isinstance(config, dict) else {}


_NODE_ID = re.compile(r"^node_id:\s*(\S+)", re.MULTILINE)


def node_id(node: Any = None) -> str | None:
    """This node's id: from `node.node_config()` where dora puts it, else from the
    ``DORA_NODE_CONFIG`` the daemon hands the process."""
    if node is not None:
        found = node_config(node).get("node_id")
        if isinstance(found, str):
            return found
    match = _NODE_ID.search(os.environ.get("DORA_NODE_CONFIG", ""))
    return match.group(1) if match else None


def _clean_machine(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def machine_id() -> str | None:
    """The machine id of the daemon that started this node (None: the default machine)."""
    return _clean_machine(os.environ.get("DORA_MACHINE_ID"))


# ---------------------------------------------------------------------------- placement


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


def _queue(spec: Any) -> tuple[int | None, str | None]:
    """-> (queue_size, queue_policy) of one input of the descriptor, None where it gives none (or
    gives something dora would not take: then dora's default is the best guess)."""
    if not isinstance(spec, dict):
        return None, None
    size, policy = spec.get("queue_size"), spec.get("queue_policy")
    return (
        size if type(size) is int and size >= 0 else None,
        policy if isinstance(policy, str) and policy else None,
    )


def route_from_descriptor(descriptor: Any, node: str | None, output_id: str, machine: str | None) -> OutputRoute:
    """The consumers of `node`/`output_id` in a dataflow descriptor, each with its machine and its
    input's queue_size and queue_policy (pure: the unit tests drive it with descriptor variants)."""
    machine = _clean_machine(machine)
    if node is None:
        return OutputRoute(output_id, None, machine, (), "this node's id is not known")
    if not isinstance(descriptor, dict) or not isinstance(descriptor.get("nodes"), list):
        return OutputRoute(output_id, node, machine, (), "no dataflow descriptor")
    default_deploy = descriptor.get("deploy")
    wanted = f"{node}/{output_id}"
    consumers = []
    for entry in descriptor["nodes"]:
        if not isinstance(entry, dict):
            continue
        inputs = entry.get("inputs")
        if not isinstance(inputs, dict):
            continue
        for input_id, spec in inputs.items():
            source = spec.get("source") if isinstance(spec, dict) else spec
            if source != wanted:
                continue
            where, unknown = _placement(entry, default_deploy)
            size, policy = _queue(spec)
            consumers.append(Consumer(str(entry.get("id")), str(input_id), where, unknown, size, policy))
    return OutputRoute(output_id, node, machine, tuple(consumers))


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
        route = route_from_descriptor(descriptor, node_id(node), output_id, machine_id())
        if len(_routes) < 4096:
            _routes[key] = route
    return route


def forget_routes() -> None:
    """Drop the cached routes (tests: node ids come back once their nodes are gone)."""
    _routes.clear()


def expected_receivers(node: Any, output_id: str) -> int:
    """How many inputs of the dataflow are wired to this node's `output_id` (at least 1, at most
    what a CUDA IPC ledger slot tracks)."""
    return min(max(len(route_of(node, output_id).consumers), 1), routing.MAX_IPC_CONSUMERS)


# ---------------------------------------------------------------------------- route limits

# Warn once per (node, output, pool). Keyed by id: dora's Node supports neither weak references
# nor attributes, and holding the node would keep it (and its outputs) alive past its user's last
# reference. A reused id can at worst skip a duplicate warning.
_warned: set[tuple[int, str, int]] = set()


def pool_size(node: Any) -> tuple[int, str]:
    """-> (bytes, where the value comes from) for this node's shared-memory pool.

    Read on every call, not cached: `node.node_config()` costs about a microsecond.
    """
    pool = node_config(node).get("shared_memory_pool_size")
    if isinstance(pool, int):
        return pool, "the dataflow YAML"
    env = os.environ.get("DORA_NODE_SHM_POOL_SIZE", "")
    if env.isdigit():
        return int(env), "DORA_NODE_SHM_POOL_SIZE"
    return DEFAULT_POOL_BYTES, "dora's default"


def suggested_pool(nbytes: int) -> str:
    """A pool setting that holds two such messages in flight, as YAML text (power-of-two MB)."""
    mb = 1
    while mb << 20 < 2 * nbytes:
        mb *= 2
    return f"{mb}MB"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB ({n} bytes)"


def _this_node() -> str:
    return node_id() or "<this node>"


def check_route(node: Any, output_id: str, nbytes: int) -> None:
    """Raise `MessageTooLargeError` if no dora route carries `nbytes`; warn once if only the slow
    daemon path does."""
    pool, source = pool_size(node)
    if nbytes <= pool:
        return
    advice = (
        f"set `shared_memory_pool_size: {suggested_pool(nbytes)}` (at least {_mib(nbytes)}) on node "
        f"'{_this_node()}' in the dataflow YAML"
    )
    if nbytes > DAEMON_PATH_MAX_PAYLOAD:
        raise MessageTooLargeError(
            f"output '{output_id}': message of {_mib(nbytes)} does not fit this node's "
            f"shared_memory_pool_size of {_mib(pool)} (from {source}), and dora's fallback path is "
            f"limited to {_mib(DAEMON_PATH_MAX_PAYLOAD)}: {advice}"
        )
    key = (id(node), output_id, pool)
    if key not in _warned and len(_warned) < 4096:
        _warned.add(key)
        log.warning(
            "output '%s': message of %s does not fit this node's shared_memory_pool_size of %s (from %s) "
            "and takes dora's slow fallback path; %s",
            output_id,
            _mib(nbytes),
            _mib(pool),
            source,
            advice,
        )


def _remote_consumers(node: Any, output_id: str) -> list:
    try:
        return route_of(node, output_id).remote()
    except Exception:  # advice only: never let it hide dora's own error
        return []


def size_error(node: Any, output_id: str, nbytes: int, error: RuntimeError) -> MessageTooLargeError | None:
    """dora's own size error (should our estimate ever be off) as a MessageTooLargeError that
    says what to change; None for any other error (the caller re-raises it as it is)."""
    if "transport limit" not in str(error) and "exceeding" not in str(error):
        return None
    remote = _remote_consumers(node, output_id)
    if remote:
        # A bigger pool does not help here: dora relays this output through its daemons.
        names = ", ".join(f"{c.node} on machine {c.machine!r}" for c in remote)
        return MessageTooLargeError(
            f"output '{output_id}': dora refused a message of {_mib(nbytes)}: the output has consumers on "
            f"other machines ({names}) and dora relays it through its daemons, which carry at most "
            f"{_mib(DAEMON_PATH_MAX_PAYLOAD)} per message. dora relays when the nodes cannot connect "
            f"directly (daemons on loopback, or no routable address: see `dora daemon --zenoh-listen`); "
            f"otherwise send smaller messages. dora said: {error}"
        )
    pool, source = pool_size(node)
    return MessageTooLargeError(
        f"output '{output_id}': dora refused a message of {_mib(nbytes)} (pool "
        f"{_mib(pool)} from {source}); set `shared_memory_pool_size: {suggested_pool(nbytes)}` "
        f"on node '{_this_node()}' in the dataflow YAML. dora said: {error}"
    )


def _write_and_send(
    node: Any, output_id: str, nbytes: int, metadata: dict, write: Callable[[Destination], None]
) -> None:
    """Have `write` fill dora's send buffer for one message of `nbytes` bytes, then send it (when
    the block ends without an error). No view of the buffer outlives this call: dora reuses it.
    Plain try/finally, no generator-based context managers: this runs for every message."""
    with node.send_output_raw(output_id, nbytes, metadata=metadata) as sample:
        if not nbytes:
            return
        array = np.frombuffer(sample, dtype=np.uint8)
        dest = Destination(array.__array_interface__["data"][0], lambda: torch.from_numpy(array))  # noqa: F821  (del below)
        try:
            write(dest)
        finally:
            dest.release()
            del array, dest


# ---------------------------------------------------------------------------- sending


def _check_user_metadata(metadata: Any) -> None:
    if metadata is not None and not isinstance(metadata, dict):
        raise EncodeError(f"metadata: expected a dict (or None), got {type(metadata).__name__}")
    if not metadata:
        return
    reserved = [k for k in metadata if isinstance(k, str) and k.startswith(RESERVED_PREFIX)]
    if reserved:
        raise EncodeError(
            f"metadata: keys starting with {RESERVED_PREFIX!r:.80} are reserved for the codec, got {reserved}"
        )
    image_keys = [k for k in DORA_IMAGE_KEYS if k in metadata]
    if image_keys:
        raise EncodeError(
            f"metadata.{image_keys[0]}: dora's image key, which says the value is flat image bytes; a tensor_codec "
            "message is not, and dora-hub image nodes would read its bytes as pixels, scrambled. Send flat bytes "
            "with tc.send_plain, or name the pixel format under another key (the nodes use `pixel_format`)"
        )


def send(node: Any, output_id: str, obj: Any, metadata: dict | None = None, *, transport: str = "auto") -> bool:
    """Encode `obj` and send it on `output_id` of a dora node, writing tensors straight into
    dora's send buffer (one pass per tensor). `metadata` holds the caller's own keys; keys starting
    with ``tc.`` are reserved. Raises `MessageTooLargeError` (naming ``shared_memory_pool_size``)
    before writing anything if no dora route can carry the message.

    ``transport="auto"`` (default): CUDA IPC when the message holds CUDA tensors and every
    consumer of the output runs on this machine, host bytes otherwise (tensor_codec/routing.py
    has the rule; ``TC_TRANSPORT`` in the node's environment forces one). ``"host"``: bytes in
    the dora message. ``"cuda-ipc"``: CUDA tensors go to receivers on this machine without
    touching the host (see `tensor_codec.ipc_configure` for the cap on bytes in flight).
    Returns False when that cap's ``on_full="drop"`` policy dropped the message, else True.
    """
    _check_user_metadata(metadata)
    if transport not in TRANSPORT_CHOICES:
        raise EncodeError(f"unsupported transport: expected one of {list(TRANSPORT_CHOICES)}, got {transport!r:.80}")
    plan = make_plan(obj)
    name, _ = routing.resolve(
        transport, plan.has_cuda, lambda: route_of(node, output_id), key=id(node), output=output_id
    )
    chosen = get_transport(name)
    outgoing = chosen.lay_out(plan, Output(output_id, lambda: expected_receivers(node, output_id)))
    if outgoing is None:
        return False  # the output's in-flight policy dropped it (CUDA IPC past its cap)
    merged = dict(metadata) if metadata else {}
    merged.update(outgoing.metadata)
    nbytes = outgoing.nbytes
    try:
        check_route(node, output_id, nbytes)
        if outgoing.in_value:
            _write_and_send(node, output_id, nbytes, merged, lambda dest: chosen.write(outgoing, dest))
        else:
            node.send_output(output_id, _EMPTY, merged)
    except RuntimeError as e:
        chosen.abandon(outgoing)  # never left: what the layout holds (a CUDA IPC slot) is freed now
        translated = size_error(node, output_id, nbytes, e)
        if translated is None:
            raise
        raise translated from e
    except BaseException:
        chosen.abandon(outgoing)
        raise
    return True


def transport_for(node: Any, output_id: str, obj: Any) -> tuple[str, str]:
    """-> (transport, why): what ``send(node, output_id, obj)`` would use, and the reason (the
    consumers' placement, the data's device, ``TC_TRANSPORT``). Nothing is sent."""
    has_cuda = make_plan(obj).has_cuda
    return routing.resolve("auto", has_cuda, lambda: route_of(node, output_id), key=id(node), output=output_id)


def send_plain(node: Any, output_id: str, tensor: torch.Tensor, metadata: dict | None = None) -> None:
    """Send `tensor`'s logical values (row-major, native byte order) as a flat UInt8 message with
    no codec keys: exactly what a dora image node expects for ``encoding: rgb8`` when given an
    (H, W, 3) tensor, even a permuted view of a (3, H, W) one. One strided pass straight into
    dora's send buffer, with the same route checks as `send`."""
    if not isinstance(tensor, torch.Tensor):
        raise EncodeError(f"tensor: expected a torch.Tensor, got {type(tensor).__qualname__}")
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
        raise EncodeError(
            f"tensor: expected a dense strided tensor with data, got layout {tensor.layout} on {tensor.device}"
        )
    plain = values_of(tensor if type(tensor) is torch.Tensor else tensor.as_subclass(torch.Tensor), ())
    nbytes = plain.numel() * plain.element_size()
    check_route(node, output_id, nbytes)

    def write(dest: Destination) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # complex32 is "experimental"
            view = dest.tensor().view(plain.dtype).view(plain.shape)
        view.copy_(plain)  # the one pass; handles permutes, crops and devices

    try:
        _write_and_send(node, output_id, nbytes, dict(metadata or {}), write)
    except RuntimeError as e:
        translated = size_error(node, output_id, nbytes, e)
        if translated is None:
            raise
        raise translated from e


# ---------------------------------------------------------------------------- receiving


def receive(event: Any, *, copy: bool = False, device: Any = None) -> Any:
    """Decode the object of a dora INPUT event (see `tensor_codec.decode`, also for `device`);
    the input id names errors."""
    if not isinstance(event, dict) or event.get("type") != "INPUT":
        kind = event.get("type") if isinstance(event, dict) else type(event).__name__
        raise DecodeError(f"event.type: expected 'INPUT', got {kind!r:.80}")
    for key in ("value", "metadata"):
        if key not in event:
            raise DecodeError(f"event: expected key {key!r}, missing")
    return decode(event["value"], event["metadata"], copy=copy, device=device, name=event.get("id"))
