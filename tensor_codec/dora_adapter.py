"""Everything the codec knows about dora, in one place.

The rest of the package never calls dora: transports lay a message out and write its bytes into
a destination they are given (transports/base.py); this module gives them dora's send buffer,
and reads what dora hands a node. What lives here:

* the node's own description: its config (`node_config`), its id (`node_id`, from dora or
  ``DORA_NODE_CONFIG``), its machine (``DORA_MACHINE_ID``), and the dataflow descriptor, read
  into an `OutputRoute` per output (`route_of`; the rule that picks a transport from it is
  routing.py's);
* what a dora route can carry (`max_send_bytes`, `send_limit`): dora's limits, measured on
  dora-rs 1.1.0 and checked before anything is written (`check_route`), dora's own size errors
  translated (`size_error`);
* sending: `send` (a codec message: one dense host tensor by dora's ``send_output`` from its own
  memory, anything else written straight into ``send_output_raw``'s buffer; `DORA_COPIES_BELOW`),
  `send_plain` (flat bytes for nodes that do not speak the codec), `transport_for`;
* receiving: `receive` (an INPUT event).

dora 1.1's limits (docs/transports.md, "dora's limits", has the measurements). A message of n
payload bytes travels as a UInt8 Arrow IPC stream of ``ipc_stream_bytes(n)`` bytes: dora writes a
validity bitmap (n/8 bytes) and 328 bytes of framing around the payload (``send_output_raw``'s
stream; the checks count it for ``send_output``'s messages too). Then:

* **the cap**: no stream over 256 MiB, on any route ("UInt8 payload too large"): a payload of at
  most 238,608,896 bytes; no setting raises it;
* **the pool**: a message whose stream, plus 1,208 bytes of chunk header, fits the free room of
  the node's shared-memory pool (``shared_memory_pool_size``, else ``DORA_NODE_SHM_POOL_SIZE``,
  else 8 MiB; one pool for all the node's outputs) is published through it, fast;
* **the daemon path**: anything else goes through the daemon, slowly (16 MB took ~95 ms instead
  of ~2 ms), and only if the whole request, stream plus metadata, is at most 64 MiB ("exceeding
  the 67108864-byte daemon transport limit"): a payload of at most about 59.6 MB (56.9 MiB).
  That is every message too big for the pool or meeting it full (receivers hold the messages
  they got, dora queues up to queue_size more per input), every message of an output dora
  pins there whatever its pool: one with a consumer input declaring ``queue_policy:
  backpressure``, or consumers on other machines that only its daemons' relay reaches (the
  daemon says so in ``DORA_NODE_CONFIG``'s ``output_routing``), and every message of an
  output whose startup handshake did not complete (`_STARTUP_GRACE_MS`; nothing says so). So
  the daemon path's limit is the one bound dora always honours
  (``max_send_bytes(..., guaranteed=True)``); more goes only while the pool takes it.

Placement (`route_of`): dora hands every node the whole dataflow (`node.dataflow_descriptor()`):
each node's inputs and its ``deploy: {machine: ...}``. A daemon started with ``--machine-id X``
sets ``DORA_MACHINE_ID=X`` in the nodes it spawns; nodes without ``deploy:`` run on the daemon
started without a machine id (and under `dora run`, which refuses ``deploy:``, everything is one
process tree on one machine).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import warnings
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch
import yaml  # type: ignore[import-untyped, unused-ignore]  # (no stubs installed unless types-PyYAML is)

from . import limits, routing, send_pipeline
from .codec import decode_in_full
from .errors import DecodeError, EncodeError, MessageTooLargeError, some_keys
from .in_place import view_in_place
from .layout import Destination, LeafLayout, values_of, write_leaf
from .plan import make_plan
from .routing import Consumer, OutputRoute
from .transports import Output
from .transports.arrow_values import arrow_type_of, value_of
from .transports.names import CHOICES as TRANSPORT_CHOICES
from .transports.names import HOST, HOST_TO_GPU
from .walk import plain_of
from .wire.header import RESERVED_PREFIX
from .wire.header_json import describe_surrogate, lone_surrogate
from .wire.structure import is_bare_tensor

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
    "node_config_problem",
    "MAX_NODE_CONFIG_CHARS",
    "receivers_per_process",
    "input_queue",
    "pool_size",
    "max_send_bytes",
    "send_limit",
    "SendLimit",
    "Pin",
    "pin",
    "output_routing",
    "ipc_stream_bytes",
    "payload_within",
    "pool_payload",
    "daemon_payload",
    "check_route",
    "suggested_pool",
    "size_error",
    "DORA_IMAGE_KEYS",
    "DEFAULT_POOL_BYTES",
    "IPC_STREAM_MAX",
    "DAEMON_LIMIT_BYTES",
    "CAP_PAYLOAD",
    "DAEMON_PATH_MAX_PAYLOAD",
    "SHM_CHUNK_OVERHEAD",
    "METADATA_RESERVE",
]

log = logging.getLogger("tensor_codec")

# dora's image convention (flat uint8 bytes described by these keys): a dora-hub node takes any
# message carrying them as such an image, so tc.send refuses them (tc.send_plain is for that).
DORA_IMAGE_KEYS = ("encoding", "width", "height")

DEFAULT_POOL_BYTES = 8 << 20  # dora's shared-memory pool when neither the YAML nor the environment sets one

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

# The caches below are keyed by id(node) (dora's Node takes neither weak references nor
# attributes), and an id is only a node's while that node lives: a new object at a freed node's
# address would inherit its routes, pins and repeats (on the GPU host's Python 3.12 a FakeNode
# made right after another was freed got its cached route, issue 37). So every key is registered
# here with its node: a weak reference where the node takes one, else the node itself (a dora
# Node: held until release_node, which the nodes' loop calls when it is done with it). A key met
# with another object than the one registered is purged from every cache before it is reused.
_held: dict[int, Any] = {}
_HELD_MAX = 4096


def node_key(node: Any) -> int:
    """id(node), valid as a cache key (see _held): one dict lookup when `node` is registered."""
    key = id(node)
    held = _held.get(key)
    if held is node or (type(held) is weakref.ref and held() is node):
        return key
    if held is not None:
        _purge(key)  # a dead node's id, reused: nothing of it may stay cached
    elif len(_held) >= _HELD_MAX:
        forget_routes()  # thousands of nodes in one process: start the caches afresh
    try:
        _held[key] = weakref.ref(node)
    except TypeError:
        _held[key] = node
    return key


def release_node(node: Any) -> None:
    """Forget what is cached for `node` and stop holding it (a node's loop, once done with it:
    dora's Node closes its outputs and leaves the dataflow only when it is freed)."""
    key = id(node)
    held = _held.get(key)
    if held is node or (type(held) is weakref.ref and held() is node):
        _purge(key)


def _purge(key: int) -> None:
    _held.pop(key, None)
    for cache in (_routes, _pins, _repeats):
        for k in [k for k in cache if k[0] == key]:
            del cache[k]
    _warned.difference_update([k for k in _warned if k[0] == key])
    routing.forget_key(key)


def route_of(node: Any, output_id: str) -> OutputRoute:
    """Where the consumers of this node's `output_id` run; read once per node and output (a
    dataflow's placement does not change while it runs). Keyed by node_key(node)."""
    key = (node_key(node), output_id)
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


def input_queue(node: Any, input_id: str) -> tuple[int | None, str | None]:
    """-> (queue_size, queue_policy) of this node's own input `input_id`, as the dataflow gives
    them (None where it does not say, or the descriptor cannot be read: dora's defaults apply)."""
    try:
        descriptor = node.dataflow_descriptor()
    except Exception:
        return None, None
    me = node_id(node)
    for entry in descriptor.get("nodes") or [] if isinstance(descriptor, dict) else []:
        if isinstance(entry, dict) and entry.get("id") == me and isinstance(entry.get("inputs"), dict):
            return _queue(entry["inputs"].get(input_id))
    return None, None


def forget_routes() -> None:
    """Drop the cached routes, pins, repeats and warnings, and the nodes registered for their keys."""
    _routes.clear()
    _pins.clear()
    _repeats.clear()
    _warned.clear()
    _held.clear()
    routing.forget_announced()


def expected_receivers(node: Any, output_id: str) -> int:
    """How many inputs of the dataflow are wired to this node's `output_id` (at least 1, at most
    what a CUDA IPC ledger slot tracks)."""
    return min(max(len(route_of(node, output_id).consumers), 1), routing.MAX_IPC_CONSUMERS)


def receivers_per_process(node: Any, output_id: str) -> int:
    """The most inputs one consumer node (one process) has wired to this node's `output_id`: how
    often one receiving process may claim a message of it in a CUDA IPC ledger (1 in nearly
    every dataflow, and where the dataflow does not say; at most what a slot tracks)."""
    consumers = route_of(node, output_id).consumers
    if len(consumers) < 2:
        return 1
    most = max(Counter(c.node for c in consumers).values())
    return min(most, routing.MAX_IPC_CONSUMERS)


# ---------------------------------------------------------------------------- dora's limits
#
# Measured on dora-rs 1.1.0 in real dataflows (docs/transports.md, "dora's limits"), read off
# its source (apis/rust/node: arrow_utils/ipc_encode.rs, node/mod.rs) where it says why.

IPC_STREAM_MAX = 256 << 20  # dora's MAX_IPC_BYTES: the Arrow IPC stream of one message, any route
DAEMON_LIMIT_BYTES = 64 << 20  # dora's MAX_MESSAGE_BYTES: one request to the daemon, metadata included
_IPC_FRAMING = 328  # schema and record-batch blocks and end marker of a UInt8 stream (measured)
# What a daemon request adds besides the stream and the metadata's own bytes: measured between 57
# and 120 bytes (a 67,108,744-byte stream went, 67,108,808 did not); a KiB of margin.
_DAEMON_FRAMING = 1 << 10
# Pool bytes a message takes beyond its stream: with 1,208 bytes to spare a message went through
# the pool and with 1,144 it did not, in pools of 70, 100 and 200 MB alike.
SHM_CHUNK_OVERHEAD = 1208
# Metadata bytes `max_send_bytes` assumes a message carries (a codec header of a few tensors is
# a few hundred bytes): a message with more (thousands of tensors) can carry a little less.
METADATA_RESERVE = 16 << 10
# Below this, and fitting the pool of an output dora does not pin, no limit is near: check_route
# returns at once (the daemon path carries it with up to 28 MiB of metadata).
_SURELY_CARRIED = 32 << 20
# A pinned output's messages from this size on are worth a warning: the daemon path is slow.
_SLOW_WARN_BYTES = 1 << 20
# Pool bytes a message needs beyond n + n/8, at most: padding (2 x 63 + 1), framing, chunk header.
_POOL_SLACK = 127 + _IPC_FRAMING + SHM_CHUNK_OVERHEAD
# dora's ZENOH_STARTUP_GRACE: an output whose consumers have not acknowledged its startup markers
# this long after "all nodes ready" stays on the daemon path for the whole run (node/mod.rs,
# wait_for_grace; dora 1.1 logs nothing a node sees). Measured with a 1 GB pool and one consumer:
# no run of 10 on an idle 2-core machine, 4 of 10 (and 3 of 8) with four busy processes on it;
# there every message over the daemon path's limit was refused from the first, at 56.9 MiB every
# one went. No setting of dora 1.1 lengthens it, and a retry cannot help (the run keeps the path).
_STARTUP_GRACE_MS = 500


def _round64(n: int) -> int:
    return (n + 63) & ~63


def ipc_stream_bytes(nbytes: int) -> int:
    """Bytes of the UInt8 Arrow IPC stream dora 1.1 makes of a payload of `nbytes` (dora's
    `uint8_layout`): a validity bitmap of nbytes/8 and the payload, each padded to 64 bytes, and
    328 bytes of framing. What the pool, the daemon path and the cap count."""
    return _round64((nbytes + 7) >> 3) + _round64(nbytes) + _IPC_FRAMING


@functools.lru_cache(maxsize=256)
def payload_within(stream_budget: int) -> int:
    """The largest payload whose stream (`ipc_stream_bytes`) is at most `stream_budget` bytes
    (0 when none is)."""
    if stream_budget < ipc_stream_bytes(0):
        return 0
    n = (stream_budget - _IPC_FRAMING) * 8 // 9  # ipc_stream_bytes(n + 1) > stream_budget
    lo, hi = max(n - 256, 0), n + 1  # padding costs at most 126 bytes: the bound lies in between
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ipc_stream_bytes(mid) <= stream_budget:
            lo = mid
        else:
            hi = mid
    return lo


CAP_PAYLOAD = payload_within(IPC_STREAM_MAX)  # 238,608,896 bytes: measured, and what dora's rule gives


def daemon_payload(metadata_bytes: int = METADATA_RESERVE) -> int:
    """The largest payload dora's daemon path carries with `metadata_bytes` of metadata."""
    return payload_within(DAEMON_LIMIT_BYTES - _DAEMON_FRAMING - metadata_bytes)


# The most the daemon path carries for a message with METADATA_RESERVE of metadata (59,636,480
# bytes: about 59.6 MB, 56.9 MiB).
DAEMON_PATH_MAX_PAYLOAD = daemon_payload()


def _fits_pool(nbytes: int, pool: int, messages: int = 1) -> bool:
    return messages * (ipc_stream_bytes(nbytes) + SHM_CHUNK_OVERHEAD) <= pool


def pool_payload(pool: int) -> int:
    """The largest payload a pool of `pool` bytes holds (alone in it)."""
    return payload_within(pool - SHM_CHUNK_OVERHEAD)


def _metadata_bytes(metadata: dict | None) -> int:
    """What a message's metadata adds to a daemon request, over-estimated: its keys' and values'
    bytes, 32 more per entry (dora's encoding adds a few)."""
    if not metadata:
        return 0
    return sum(_value_bytes(key) + _value_bytes(value) + 32 for key, value in metadata.items())


def _value_bytes(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, (list, tuple)):
        return 8 + sum(_value_bytes(v) for v in value)
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return 16


# ---------------------------------------------------------------------------- why an output is on the daemon path

_NODE_CONFIGS: dict[str, dict | None] = {}


# libyaml's loader where PyYAML was built with it: a config carries the whole dataflow.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _IgnoreTags(_SafeLoader):
    """YAML as the daemon writes DORA_NODE_CONFIG: tags such as ``!Tcp`` read as plain values."""


_IgnoreTags.add_multi_constructor("!", lambda loader, suffix, node: None)


# The kernel hands a process no environment string over 128 KiB (MAX_ARG_STRLEN), so a daemon's
# config is never near this; a config handed in another way (a Mapping) is read no further.
MAX_NODE_CONFIG_CHARS = 1 << 20


def _not_utf8(text: str) -> str | None:
    """What in `text` is not UTF-8, or None. Bytes that are not UTF-8 in an environment variable
    reach Python as surrogate escapes (0xff as U+DCFF): shown as the byte they were."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        char = ord(text[e.start])
        what = f"the byte 0x{char - 0xDC00:02x}" if 0xDC80 <= char <= 0xDCFF else f"the code point U+{char:04X}"
        return f"{what} at character {e.start}"
    return None


def _first_alias(text: str) -> str | None:
    """The first YAML anchor or alias in `text` (its kind, name and place), or None. Tokens only:
    scanning expands nothing and stops at the first. Text YAML cannot scan is left to the parse."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML was built with it
    try:
        for token in yaml.scan(text, Loader=loader):
            if isinstance(token, (yaml.AnchorToken, yaml.AliasToken)):
                kind, sign = ("an anchor", "&") if isinstance(token, yaml.AnchorToken) else ("an alias", "*")
                place = token.start_mark
                return f"{kind} ({sign}{token.value:.40}) at line {place.line + 1} column {place.column + 1}"
    except yaml.YAMLError:
        return None
    return None


def node_config_problem(text: str) -> str | None:
    """Why DORA_NODE_CONFIG's `text` must not be parsed (the variable, what was expected, what came),
    or None. A daemon writes UTF-8 YAML without anchors or aliases (serde_yaml emits none); an alias
    repeats a whole subtree wherever it is read, so 569 bytes of nested aliases grew to billions of
    values and ended a node with a MemoryError."""
    if len(text) > MAX_NODE_CONFIG_CHARS:
        return f"DORA_NODE_CONFIG: expected at most {MAX_NODE_CONFIG_CHARS} characters, got {len(text)}"
    not_utf8 = _not_utf8(text)
    if not_utf8 is not None:
        return f"DORA_NODE_CONFIG: expected UTF-8 text (the YAML a dora daemon writes), got {not_utf8}"
    alias = _first_alias(text)
    if alias is not None:
        return f"DORA_NODE_CONFIG: expected YAML without anchors or aliases (a dora daemon writes none), got {alias}"
    return None


def daemon_node_config(text: str | None = None) -> dict | None:
    """What the daemon hands the process in ``DORA_NODE_CONFIG`` (`text`, else the environment's),
    parsed: ``node_id``, ``run_config`` (the node's inputs and outputs), ``dataflow_descriptor``,
    ``output_routing``; tagged values (a Rust enum's variant, ``!Tcp``) read as None. None when
    absent, not a YAML mapping (not started by a daemon), or not to be parsed at all
    (`node_config_problem`: a node refuses to start on it, nodes/common/startup.py). Parsed once
    per process: it holds the whole dataflow."""
    if text is None:
        text = os.environ.get("DORA_NODE_CONFIG")
    if not text:
        return None
    if text not in _NODE_CONFIGS:
        _NODE_CONFIGS.clear()  # one config per process: the cache holds the latest only
        problem = node_config_problem(text)
        if problem is not None:
            log.debug("%s: not read", problem)
            _NODE_CONFIGS[text] = None
            return None
        try:
            config = yaml.load(text, Loader=_IgnoreTags)  # a SafeLoader that ignores tags
        except yaml.YAMLError as e:
            log.debug("DORA_NODE_CONFIG is not YAML: %s", e)
            config = None
        _NODE_CONFIGS[text] = config if isinstance(config, dict) else None
    return _NODE_CONFIGS[text]


def output_routing(text: str | None = None) -> dict | None:
    """The daemon's routing of this node's outputs, from ``DORA_NODE_CONFIG`` (dora 1.1 writes
    ``output_routing: {<output>: {daemon_only: bool, required_ackers: [...]}}`` there): output id
    -> its entry; None where the config gives none (not started by a daemon, an older dora)."""
    config = daemon_node_config(text)
    routing_ = config.get("output_routing") if config is not None else None
    return routing_ if isinstance(routing_, dict) else None


@dataclass(frozen=True)
class Pin:
    """Why dora keeps an output on its daemon path whatever the pool, and what lifts that.
    `cure` has ``{limit}`` where the daemon path's limit goes."""

    why: str
    cure: str


def _inputs(consumers: list) -> str:
    return ", ".join(f"{c.node}/{c.input}" for c in consumers)


def _pin_of(route: OutputRoute, daemon_only: Any) -> Pin | None:
    """The pin of an output: what the daemon decided (`daemon_only`: True, False, or None when it
    did not say), explained by the consumers the dataflow gives it."""
    if daemon_only is False:
        return None
    backpressure = [c for c in route.consumers if c.queue_policy == routing.BACKPRESSURE]
    if backpressure:  # measured: dora 1.1 pins such an output even with a 1 GB pool
        return Pin(
            f"its consumer input {_inputs(backpressure)} declares `queue_policy: backpressure`, which dora 1.1 "
            "serves on its daemon path only (the output never uses the shared-memory pool)",
            f"remove `queue_policy: backpressure` from {_inputs(backpressure)} (dora's default queue policy "
            "lets the pool carry the output), or send at most {limit} per message",
        )
    if daemon_only is not True:
        return None  # the daemon did not say, and the descriptor proves nothing
    remote = route.remote()
    if remote:
        names = ", ".join(f"{c.node} on machine {c.machine!r}" for c in remote)
        return Pin(
            f"it has consumers on other machines ({names}) and dora relays it through its daemons: the nodes "
            "cannot connect directly (daemons on loopback, or no routable address), or a remote input declares "
            "`input_timeout`",
            "start the daemons with a routable `dora daemon --zenoh-listen <IP>` so that the nodes connect directly "
            "(then the pool carries the output), send to those consumers on an output of their own with smaller "
            "messages, or send at most {limit} per message",
        )
    return Pin(
        "dora's daemon keeps it there (its output_routing says daemon_only: a consumer that only its daemons' "
        "relay reaches, such as a dynamic node)",
        "send at most {limit} per message",
    )


_pins: dict[tuple[int, str], Pin | None] = {}
_UNSEEN = Pin("", "")  # what _pins.get gives for an output not looked at yet


def pin(node: Any, output_id: str) -> Pin | None:
    """Why dora keeps this output on its daemon path whatever the pool (None: it does not),
    read once per node and output: the daemon's routing does not change while a node runs."""
    key = (node_key(node), output_id)
    if key in _pins:
        return _pins[key]
    try:
        routing_ = output_routing() or {}
        entry = routing_.get(output_id)
        daemon_only = entry.get("daemon_only") if isinstance(entry, dict) else None
        found = _pin_of(route_of(node, output_id), daemon_only)
    except Exception as e:  # advice: never let it stop a send dora would make
        log.debug("output '%s': its routing could not be read: %s", output_id, e)
        found = None
    if len(_pins) < 4096:
        _pins[key] = found
    return found


# ---------------------------------------------------------------------------- the limit of one output

# Warn once per (node, output, pool, kind). Keyed by id: dora's Node supports neither weak
# references nor attributes, and holding the node would keep it (and its outputs) alive past its
# user's last reference. A reused id can at worst skip a duplicate warning.
_warned: set[tuple[int, str, int, str]] = set()


def pool_size(node: Any) -> tuple[int, str]:
    """-> (bytes, where the value comes from) for this node's shared-memory pool.

    Read on every call, not cached: `node.node_config()` costs about a microsecond. dora reads
    ``64MB`` in the YAML as 64 MiB (and refuses ``64MiB``).
    """
    pool = node_config(node).get("shared_memory_pool_size")
    if isinstance(pool, int):
        return pool, "the dataflow YAML"
    env = os.environ.get("DORA_NODE_SHM_POOL_SIZE", "")
    if env.isdigit():
        return int(env), "DORA_NODE_SHM_POOL_SIZE"
    return DEFAULT_POOL_BYTES, "dora's default"


def suggested_pool(nbytes: int, messages: int = 2) -> str:
    """A pool setting that holds `messages` such messages at once (two by default: the one a
    receiver still holds and the next), as YAML text: a power of two in MB, which dora reads as
    MiB."""
    need = messages * (ipc_stream_bytes(nbytes) + SHM_CHUNK_OVERHEAD)
    mb = 1
    while mb << 20 < need:
        mb *= 2
    return f"{mb}MB"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB ({n} bytes)"


def _this_node() -> str:
    return node_id() or "<this node>"


def _set_pool(nbytes: int, messages: int = 2) -> str:
    setting = suggested_pool(nbytes, messages)
    return f"set `shared_memory_pool_size: {setting}` on node '{_this_node()}' in the dataflow YAML"


@dataclass(frozen=True)
class SendLimit:
    """The most payload bytes one message on an output can carry (`max_bytes`), which of dora's
    limits sets it (`kind`: "cap", "pool" or "daemon"), that limit in words, and the output's
    pin (None: messages that fit the pool take it).

    `max_bytes` past the daemon path's limit goes only through the pool, and dora takes the pool
    only while it has room for the message at that moment and once the output's startup
    handshake completed (`_STARTUP_GRACE_MS`); otherwise dora sends on its daemon path and refuses
    such a message. `guaranteed_bytes` is what goes whatever happens: the daemon path's limit (at
    most `max_bytes`; equal on an output dora pins there)."""

    max_bytes: int
    guaranteed_bytes: int
    kind: str
    limit: str
    pool: int
    pool_source: str
    pin: Pin | None


def send_limit(node: Any, output_id: str, metadata_bytes: int = METADATA_RESERVE) -> SendLimit:
    """The one rule: what dora 1.1 carries on this output of this node, for a message with
    `metadata_bytes` of metadata; `limit` says why a bigger message cannot go. `max_send_bytes`
    and `check_route` both read it."""
    pool, source = pool_size(node)
    daemon = daemon_payload(metadata_bytes)
    daemon_words = f"its daemon path, which carries at most {_mib(daemon)} per message (64 MiB with the metadata)"
    pinned = pin(node, output_id)
    if pinned is not None:
        why = f"dora sends this output on {daemon_words}, whatever the pool: {pinned.why}"
        return SendLimit(daemon, daemon, "daemon", why, pool, source, pinned)
    fits = pool_payload(pool)
    if fits >= CAP_PAYLOAD:
        why = (
            "dora caps one message at an Arrow IPC stream of 256 MiB (the payload and 1/8 more for the validity "
            f"bitmap it writes): at most {_mib(CAP_PAYLOAD)} of payload, whatever the pool"
        )
        return SendLimit(CAP_PAYLOAD, daemon, "cap", why, pool, source, None)
    why = (
        f"it does not fit this node's shared_memory_pool_size of {_mib(pool)} (from {source}; it holds at most "
        f"{_mib(fits)} of payload, with dora's 1/8 validity bitmap), so dora would send it on {daemon_words}"
    )
    kind = "pool" if fits >= daemon else "daemon"
    return SendLimit(max(fits, daemon), daemon, kind, why, pool, source, None)


def max_send_bytes(
    node: Any, output_id: str, *, metadata_bytes: int = METADATA_RESERVE, guaranteed: bool = False
) -> int:
    """The most payload bytes `tc.send` (or `tc.send_plain`) can carry in one message on
    `output_id` of `node`, given dora 1.1's routes: the 256 MiB cap, the node's shared-memory
    pool, and the daemon path's 64 MiB for outputs dora keeps there (a consumer declaring
    ``queue_policy: backpressure``, consumers on other machines reached through the daemons'
    relay). A bigger message is refused by `tc.send` with `MessageTooLargeError` before anything
    is written.

    This default is not a bound dora always honours: past the daemon path's limit (56.9 MiB), a
    message goes only through the pool, and dora sends on its daemon path, which refuses it,
    whenever the pool has no room for it at that moment (receivers hold messages, dora queues
    them) and, for the whole run, when the output's startup handshake with its consumers did not
    complete (seen on a loaded machine: every such message refused from the first). tc.send then
    raises `MessageTooLargeError` saying so. With ``guaranteed=True`` it is the bound dora always
    honours on the output: the daemon path's limit (the same number on an output dora pins there).

    The default is the larger because it is what can ever go: tc.send refuses before writing only
    what never could, and a node that refuses work whose result could never be sent (the JPEG
    decoder) should not refuse work that goes on every healthy run. A node that must never have a
    message refused sends at most the guaranteed bound (several messages, or several outputs).

    The payload of a codec message is its tensors' bytes, each padded to 64 bytes (what
    ``tc.encode(obj)[0]`` holds); `metadata_bytes` is what its metadata may take (the default
    covers the header of a few hundred tensors)."""
    limit = send_limit(node, output_id, metadata_bytes)
    return limit.guaranteed_bytes if guaranteed else limit.max_bytes


def _cure(limit: SendLimit, nbytes: int) -> str:
    """What lets a message of `nbytes` through `limit`, in words."""
    if limit.pin is not None:
        return "To carry it, " + limit.pin.cure.format(limit=_mib(limit.max_bytes))
    if limit.kind == "cap" or nbytes > CAP_PAYLOAD:
        return "No dora setting raises this cap: send the data in parts (several messages, or several outputs)"
    return f"To carry it, {_set_pool(nbytes)} (two such messages at once), or send at most {_mib(limit.max_bytes)}"


def _surely_carried(node: Any, output_id: str, nbytes: int) -> bool:
    """The common cases, in a few hundred nanoseconds past pool_size, on an output looked at
    before: a message well within the pool (its stream is at most n + n/8 + 455 bytes) on one not
    pinned; on one pinned to the daemon path, a message below the size worth a warning (the daemon
    path carries _SURELY_CARRIED with any header the limits let through). Nothing to check or warn."""
    if nbytes > _SURELY_CARRIED:
        return False
    pinned = _pins.get((node_key(node), output_id), _UNSEEN)
    if pinned is None:
        return nbytes + (nbytes >> 3) + _POOL_SLACK <= pool_size(node)[0]
    return pinned is not _UNSEEN and nbytes < _SLOW_WARN_BYTES


def check_route(node: Any, output_id: str, nbytes: int, metadata: dict | None = None) -> None:
    """Raise `MessageTooLargeError` if dora cannot carry a message of `nbytes` payload bytes with
    `metadata` on this output, naming the limit it would hit and what lifts it; warn once when
    dora would carry it on its slow daemon path, or only while its pool is otherwise empty."""
    if _surely_carried(node, output_id, nbytes):
        return
    limit = send_limit(node, output_id, _metadata_bytes(metadata))
    if nbytes > limit.max_bytes:
        raise MessageTooLargeError(
            f"output '{output_id}': dora cannot carry a message of {_mib(nbytes)}: {limit.limit}. "
            + _cure(limit, nbytes)
        )
    _warn_slow(node, output_id, nbytes, limit)


def _warn_once(node: Any, output_id: str, pool: int, kind: str, message: str, *args: Any) -> None:
    key = (node_key(node), output_id, pool, kind)
    if key not in _warned and len(_warned) < 4096:
        _warned.add(key)
        log.warning(message, *args)


def _warn_slow(node: Any, output_id: str, nbytes: int, limit: SendLimit) -> None:
    """A message dora carries: say once if it goes the slow way, or fits only an empty pool."""
    pool = limit.pool
    if limit.pin is not None:
        if nbytes >= _SLOW_WARN_BYTES:
            _warn_once(
                node, output_id, pool, "pinned",
                "output '%s': messages of %s take dora's slow daemon path: %s",
                output_id, _mib(nbytes), limit.pin.why,
            )  # fmt: skip
        return
    if not _fits_pool(nbytes, pool):
        _warn_once(
            node, output_id, pool, "slow",
            "output '%s': message of %s does not fit this node's shared_memory_pool_size of %s (from %s) "
            "and takes dora's slow fallback path; %s",
            output_id, _mib(nbytes), _mib(pool), limit.pool_source, _set_pool(nbytes),
        )  # fmt: skip
    elif nbytes > daemon_payload(0) and not _fits_pool(nbytes, pool, 2):
        _warn_once(
            node, output_id, pool, "alone",
            "output '%s': a message of %s fits this node's shared_memory_pool_size of %s (from %s) only alone: "
            "while a receiver still holds the previous one (a `for event in node` loop does until the next "
            "event), dora sends the next on its daemon path, which refuses messages over %s; %s",
            output_id, _mib(nbytes), _mib(pool), limit.pool_source, _mib(daemon_payload(0)), _set_pool(nbytes),
        )  # fmt: skip


# ---------------------------------------------------------------------------- dora's own errors

# What dora 1.1 says when a message is over one of its limits (the first two: the cap; then the
# daemon path's, from the node and from its TCP framing).
_CAP_WORDS = ("payload too large", "Arrow IPC fallback encode")
_DAEMON_WORDS = ("daemon transport limit", "exceeding the", "exceeds maximum")


_EYRE_CAUSE = re.compile(r"^\d+: ")  # eyre numbers the causes of a chain


def _dora_words(error: BaseException) -> str:
    """dora's own sentence from its error, without eyre's "Location:" and stack backtrace."""
    text = str(error).split("\n\nLocation:", 1)[0].split("\n\nStack backtrace:", 1)[0]
    lines = [_EYRE_CAUSE.sub("", line.strip()) for line in text.splitlines() if line.strip()]
    for line in reversed(lines):  # the innermost cause names the limit
        if any(w in line for w in _CAP_WORDS + _DAEMON_WORDS):
            return line[:600]
    return " ".join(lines)[:600]


def _limit_hit(text: str, nbytes: int, metadata_bytes: int) -> str | None:
    """Which of dora's limits its error `text` is about: "cap", "daemon" or None (not a size error)."""
    if any(w in text for w in _CAP_WORDS) and ipc_stream_bytes(nbytes) > IPC_STREAM_MAX:
        return "cap"
    if "payload too large" in text:
        return "cap"
    if any(w in text for w in _DAEMON_WORDS):
        return "daemon"
    # dora's TCP framing refuses a request just over 64 MiB with no more than this to say.
    if "internal error" in text and ipc_stream_bytes(nbytes) + metadata_bytes > DAEMON_LIMIT_BYTES - (1 << 20):
        return "daemon"
    return None


def size_error(
    node: Any, output_id: str, nbytes: int, error: RuntimeError, metadata: dict | None = None
) -> MessageTooLargeError | None:
    """dora's own size error (should our estimate ever be off, the pool be full or the output's
    startup handshake have failed) as a MessageTooLargeError naming the limit hit and what lifts
    it; None for any other error (the caller re-raises it as it is)."""
    meta = _metadata_bytes(metadata)
    hit = _limit_hit(str(error), nbytes, meta)
    if hit is None:
        return None
    said = _dora_words(error)
    head = f"output '{output_id}': dora refused a message of {_mib(nbytes)}"
    if hit == "cap":
        return MessageTooLargeError(
            f"{head}: it is over dora's cap on one message, an Arrow IPC stream of 256 MiB (at most "
            f"{_mib(CAP_PAYLOAD)} of payload), whatever the pool: no dora setting raises it; send the data in "
            f"parts (several messages, or several outputs). dora said: {said}"
        )
    return MessageTooLargeError(
        f"{head} on its daemon path: {_daemon_cause(node, output_id, nbytes, meta)} dora said: {said}"
    )


def _daemon_cause(node: Any, output_id: str, nbytes: int, metadata_bytes: int) -> str:
    """Why a message went on the daemon path, and what lets it through, in words."""
    limit = send_limit(node, output_id, metadata_bytes)
    carried = _mib(daemon_payload(metadata_bytes))
    if limit.pin is not None:
        return f"this output goes there whatever its pool: {limit.pin.why}; {limit.pin.cure.format(limit=carried)}."
    remote = _remote_consumers(node, output_id)
    if remote:  # the daemon's routing was not given to say so (an older dora): the descriptor does
        names = ", ".join(f"{c.node} on machine {c.machine!r}" for c in remote)
        return (
            f"the output has consumers on other machines ({names}) and dora relays it through its daemons, which "
            f"carry at most {carried} per message. dora relays when the nodes cannot connect directly (daemons on "
            f"loopback, or no routable address: see `dora daemon --zenoh-listen`); otherwise send smaller messages."
        )
    pool = limit.pool
    if not _fits_pool(nbytes, pool):
        return (
            f"it does not fit this node's shared_memory_pool_size of {_mib(pool)} (from {limit.pool_source}), and "
            f"the daemon path carries at most {carried} per message: {_set_pool(nbytes)} (two such messages at once)."
        )
    return _fell_back(output_id, nbytes, limit, carried, _messages_in_flight(node, output_id))


def _fell_back(output_id: str, nbytes: int, limit: SendLimit, carried: str, in_flight: int) -> str:
    """Why dora sent a message its pool should have held on its daemon path, what always goes, and
    what to do. The two causes cannot be told apart from here (dora says neither), so both are
    named with what shows which: a handshake that failed refuses every such message of the run."""
    pool = limit.pool
    if _fits_pool(nbytes, pool, in_flight):
        room = (
            "make room in it (receivers that drop messages sooner, a smaller queue_size, fewer big messages on the "
            "node's other outputs) or raise it"
        )
    else:
        room = (
            f"{_set_pool(nbytes, in_flight)} ({in_flight} such messages: the one being sent, and per consumer input "
            "one its receiver holds and its queue_size queued)"
        )
    return (
        f"dora fell back to its daemon path although this node's shared_memory_pool_size of {_mib(pool)} (from "
        f"{limit.pool_source}) should have held the message. That path carries at most {carried} per message, "
        f"and that much always goes (`tc.max_send_bytes(node, '{output_id}', guaranteed=True)`); to have every "
        "message go, send no more (several messages, or several outputs). dora falls back when the pool had no room "
        "for it at that moment: a message stays in it while a receiver holds it or dora queues it for one (one pool "
        f"for all the node's outputs); to carry it, {room}. It also falls back for the whole run when the output's "
        f"startup handshake with its consumers did not complete within dora's {_STARTUP_GRACE_MS} ms (a loaded "
        "machine): then every message past that path's limit is refused from the first, and only a fresh start "
        "lifts it (stop and run the dataflow again)."
    )


def _messages_in_flight(node: Any, output_id: str) -> int:
    """How many messages of this output the pool may hold at once: the one being sent, and per
    consumer input one its receiver holds and as many as its queue holds."""
    try:
        consumers = route_of(node, output_id).consumers
    except Exception:
        consumers = ()
    if not consumers:
        return 2
    return 1 + sum(c.capacity + 1 for c in consumers)


def _remote_consumers(node: Any, output_id: str) -> list:
    try:
        return route_of(node, output_id).remote()
    except Exception:  # advice only: never let it hide dora's own error
        return []


# Which of dora's two primitives sends host bytes. `send_output` copies an Arrow array's bytes
# into its shared memory itself, in one memcpy, and its receivers map the message faster;
# `send_output_raw` hands out the buffer for tc to write (compacting, padding, several leaves, or
# one copy spread over torch's threads). Measured through dora by bench/dora_latency.py (its
# "dora's primitives" table and the tc:send_output / tc:send_output_raw rows): for one dense host
# tensor, send_output is the faster below this size, tc's threaded copy into the raw buffer above.
DORA_COPIES_BELOW = 32 << 20


def _value_for_dora_to_copy(chosen: Any, outgoing: Any) -> pa.Array | None:
    """The Arrow value over the message's own bytes when `send_output` should copy it (see
    DORA_COPIES_BELOW), else None: tc writes the value into `send_output_raw`'s buffer."""
    if outgoing.nbytes >= DORA_COPIES_BELOW or chosen.name != HOST:
        return None
    return chosen.value_in_place(outgoing)


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
    """The caller's metadata: a dict whose keys are not the codec's nor dora's image keys, and
    that UTF-8 can carry. It runs on every message, with the caches cold, so it checks the keys
    once per set of keys (a stream repeats its keys message after message) and leaves the
    values to dora: dora refuses text UTF-8 cannot carry before it sends anything (a
    UnicodeEncodeError, dora 1.1), and `_unencodable` then names the field."""
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise EncodeError(f"metadata: expected a dict (or None), got {type(metadata).__name__}")
    keys = tuple(metadata)
    if keys not in _keys_checked and not _keys_pass(keys):
        _refuse_user_metadata(metadata)  # raises, naming what is wrong, unless nothing is


# Key tuples whose every key is text UTF-8 carries, not reserved, not dora's image key (what a
# stream's metadata repeats); emptied when full (keys that change every message gain nothing).
_keys_checked: set[tuple] = set()
_KEYS_CHECKED_MAX = 256


def _keys_pass(keys: tuple) -> bool:
    for key in keys:
        if not (
            type(key) is str
            and not key.startswith(RESERVED_PREFIX)
            and key not in _DORA_IMAGE_KEY_SET
            and (key.isascii() or not lone_surrogate(key))
        ):
            return False
    if len(_keys_checked) >= _KEYS_CHECKED_MAX:
        _keys_checked.clear()
    _keys_checked.add(keys)
    return True


def _unencodable(metadata: dict | None, error: UnicodeEncodeError) -> EncodeError | UnicodeEncodeError:
    """What to raise when dora refused `metadata`'s text (see `_check_user_metadata`): the field
    named, or dora's own error where the caller's metadata holds no such text."""
    try:
        _refuse_user_metadata(metadata or {})
    except EncodeError as named:
        return named
    return error


def _refuse_user_metadata(metadata: dict) -> None:
    """Raise for what is wrong in the caller's metadata (in this order: reserved keys, text UTF-8
    cannot carry, dora's image keys), if anything is."""
    reserved = [k for k in metadata if isinstance(k, str) and k.startswith(RESERVED_PREFIX)]
    if reserved:
        raise EncodeError(
            f"metadata: keys starting with {RESERVED_PREFIX!r:.80} are reserved for the codec, got "
            f"{some_keys(reserved)}: forwarding a received message's metadata? tc.carry(event['metadata']) keeps "
            "what travels on with a new message (not the codec's keys, nor those that described the input)"
        )
    for key, value in metadata.items():
        ascii_value = type(value) in _NO_TEXT or (type(value) is str and value.isascii())
        if not (ascii_value and type(key) is str and key.isascii()):
            _refuse_surrogates(key, value)  # only non-ASCII text (or text in a list) can hold one
    image_keys = [k for k in DORA_IMAGE_KEYS if k in metadata]
    if image_keys:
        raise EncodeError(
            f"metadata.{image_keys[0]}: dora's image key, which says the value is flat image bytes; a tensor_codec "
            "message is not, and dora-hub image nodes would read its bytes as pixels, scrambled. Send flat bytes "
            "with tc.send_plain, or name the pixel format under another key (the nodes use `pixel_format`); "
            "forwarding a received message's metadata? tc.carry(event['metadata']) drops these keys"
        )


_NO_TEXT = frozenset({int, float, bool, type(None)})
_DORA_IMAGE_KEY_SET = frozenset(DORA_IMAGE_KEYS)


def _refuse_surrogates(key: Any, value: Any) -> None:
    """dora carries metadata as UTF-8 text (Rust strings): a lone surrogate cannot go."""
    values = value if isinstance(value, (list, tuple)) else (value,)
    for text, what in [(key, "key"), *((v, "value") for v in values)]:
        found = lone_surrogate(text) if isinstance(text, str) else None
        if found:
            raise EncodeError(
                f"metadata[{key!r:.80}]: expected a {what} UTF-8 can carry, got {describe_surrogate(text, found)}"
            )


def send(node: Any, output_id: str, obj: Any, metadata: dict | None = None, *, transport: str = "auto") -> bool:
    """Encode `obj` and send it on `output_id` of a dora node with one copy of each tensor's
    bytes: dora's own (``send_output`` of the tensor's memory) for one dense host tensor under
    `DORA_COPIES_BELOW`, else tc's, straight into dora's send buffer (``send_output_raw``).
    `metadata` holds the caller's own keys; keys starting with ``tc.`` are reserved. Raises
    `MessageTooLargeError` (naming the limit of dora's it is over, and what lifts it) before
    writing anything if no dora route can carry the message (`max_send_bytes` says how much can
    go).

    ``transport="auto"`` (default): CUDA IPC when the message holds CUDA tensors and every
    consumer of the output runs on this machine, host bytes otherwise; a message under
    ``TC_IPC_MIN_BYTES`` goes as host bytes that its receivers restore onto the same GPU
    (tensor_codec/routing.py has the rule; ``TC_TRANSPORT`` in the node's environment forces
    one). ``"host"``: bytes in
    the dora message. ``"cuda-ipc"``: CUDA tensors go to receivers on this machine without
    touching the host (see `tensor_codec.ipc_configure` for the cap on bytes in flight).
    Returns False when that cap's ``on_full="drop"`` policy dropped the message, else True.
    """
    if metadata is not None and (type(metadata) is not dict or tuple(metadata) not in _keys_checked):
        _check_user_metadata(metadata)  # raises, naming what is wrong; else its keys pass from now on
    if transport not in TRANSPORT_CHOICES:
        raise EncodeError(f"unsupported transport: expected one of {list(TRANSPORT_CHOICES)}, got {transport!r:.80}")
    if type(obj) in _REPEATABLE and _repeats:
        # A stream's repeat (most messages; `_Repeat`), in this one Python frame: between messages
        # the caches are cold, and each call costs a microsecond or two (two calls fewer: 4 to 5
        # us less of a 1 MB message's latency, bench/dora_latency.py --split, three alternating
        # runs per tree; what is left is torch's attribute reads).
        # An Image's (Video's, Mask's) reads would go through its __torch_function__, and a plain
        # alias of it (as_subclass) is a second tensor object (about 18 us of a 1 MB Image's
        # latency in a dora node; bench/README.md, eighth round): its state is read here on the
        # Image itself, with subclasses' __torch_function__ off for those reads alone (dora's
        # send, and any Python node wrapping it, runs with it on).
        t = obj
        dispatch_off = None if type(obj) is torch.Tensor else _SUBCLASS_TORCH_FUNCTION_OFF()
        if dispatch_off is not None:
            dispatch_off.__enter__()
        value = written = copied = None
        try:
            try:
                repeat = _repeats.get((id(node), output_id, type(obj), t.dtype, t.shape, t.stride()))
            except RuntimeError:  # a tensor without strides (sparse, nested): never a repeat
                repeat = None
            # Autograd: another header. Lazy bits: the storage does not hold the values.
            if (
                repeat is not None
                and (repeat.held is node or repeat.held() is node)
                and t.is_cpu
                and not (t.requires_grad or t.is_neg() or (repeat.complex and t.is_conj()))
            ):
                nbytes = repeat.nbytes
                if not (repeat.layout.raw_span and nbytes < DORA_COPIES_BELOW):
                    written = repeat  # tc writes the bytes into send_output_raw's buffer
                # dora copies the span from where it lies (send_output). A storage resized or freed
                # after the view was made would be read at a dangling address: the full path names it.
                # (layout.holds_dense_span and arrow_values.value_of, inlined.)
                elif t.untyped_storage().nbytes() >= t.storage_offset() * repeat.element_size + nbytes:
                    address = t.data_ptr()  # dense layouts address bytes from data_ptr() up
                    unit = repeat.unit
                    if unit is not None and not address % repeat.element_size:
                        data = pa.foreign_buffer(address, nbytes, base=t)
                        value = pa.Array.from_buffers(unit, nbytes // repeat.element_size, [None, data])
                    else:
                        value = value_of(address, nbytes, t.dtype, t)
                    copied = repeat  # dora copies `value`
        finally:
            if dispatch_off is not None:
                dispatch_off.__exit__(None, None, None)
        if written is not None:
            # (A crop of an Image, rarely sent, is written from a plain alias: torch's copy.)
            plain = t if dispatch_off is None else obj.as_subclass(torch.Tensor)
            return _send_repeat_written(node, output_id, plain, metadata, written)
        if copied is not None:
            merged = {**metadata, **copied.metadata} if metadata else dict(copied.metadata)
            try:
                node.send_output(output_id, value, merged)
            except RuntimeError as e:
                translated = size_error(node, output_id, nbytes, e, merged)
                if translated is None:
                    raise
                raise translated from None  # dora's words are in the message (see below)
            except UnicodeEncodeError as e:
                raise _unencodable(metadata, e) from None
            return True
    output = Output(
        output_id,
        lambda: expected_receivers(node, output_id),
        receivers_per_process=lambda: receivers_per_process(node, output_id),
    )
    outgoing = send_pipeline.lay_out(obj, transport, output, lambda: route_of(node, output_id), node_key(node))
    if outgoing is None:
        return False  # the output's in-flight policy dropped it (CUDA IPC past its cap)
    merged = dict(metadata) if metadata else {}
    merged.update(outgoing.metadata)
    nbytes = outgoing.nbytes
    # Until it has left, what the layout holds (a CUDA IPC slot) is freed on any failure.
    with outgoing:
        try:
            check_route(node, output_id, nbytes, merged)
            if not outgoing.in_value:
                node.send_output(output_id, _EMPTY, merged)
            elif (in_place := _value_for_dora_to_copy(outgoing.transport, outgoing)) is not None:
                node.send_output(output_id, in_place, merged)
            else:
                _write_and_send(node, output_id, nbytes, merged, lambda dest: send_pipeline.write(outgoing, dest))
        except RuntimeError as e:
            translated = size_error(node, output_id, nbytes, e, merged)
            if translated is None:
                raise
            # dora's words are in the message; its error (eyre's location and a Rust stack
            # backtrace) is not chained: it would print below ours and bury it.
            raise translated from None
        except UnicodeEncodeError as e:
            raise _unencodable(metadata, e) from None
    # Sent: what it fixed is kept for the stream's next message (outside the error translation).
    if outgoing.transport.name == HOST and _one_plain_leaf(outgoing.plan):
        _remember_repeat(node, output_id, obj, outgoing.plan.leaves[0], outgoing)
    return True


# ---------------------------------------------------------------------------- a stream's repeats


@dataclass(frozen=True, slots=True)
class _Repeat:
    """What an output's message of a plain host tensor (or attribute-less TVTensor) fixed, for
    the next one of the same class, dtype, shape and strides: the codec's metadata (the same
    header) and how its bytes go (the same layout: a dense span, which `send_output` copies, or
    bytes tc writes into `send_output_raw`'s buffer: a strided crop, compacted in one pass); dora
    surely carries them (`_surely_carried`: up to 32 MiB, so a span from DORA_COPIES_BELOW up is
    no repeat).
    A stream sends the same layout message after message (or a few layouts in turn); the plan,
    the transport's rule, the layout and the route check gave these once and would give them
    again (a host tensor goes as host bytes whatever the transport asked for), so a repeat skips
    them: through dora, that path costs 100 to 200 us a message with the caches cold (a cropped
    1 MB tensor went 1.16x the `pa.array` pattern's time on it; bench/dora_latency.py). Only the
    tensor's own state is checked again, with what the dtype fixed kept here (each torch call
    costs microseconds with the caches cold, as between messages)."""

    metadata: dict
    nbytes: int
    element_size: int
    complex: bool  # the lazy conjugate bit exists only on complex tensors
    unit: pa.DataType | None  # the Arrow type of the dtype (arrow_values.value_of), None: it has none
    # The wire layout (no source tensor: the cache must not keep one alive); `raw_span`: a dense span.
    layout: LeafLayout
    # What _held holds for the node (see node_key): its weak reference, or the node itself where
    # it takes none (held strongly, so its id is never another node's). A node whose id is
    # another's now takes the full path, whose node_key purges what was cached for the old one.
    held: Any


# A TVTensor's attributes read as a plain tensor's, without a second tensor object (see `send`).
_SUBCLASS_TORCH_FUNCTION_OFF = torch._C.DisableTorchFunctionSubclass

# (id(node), output, type, dtype, shape, strides) -> _Repeat; the oldest goes past _REPEATS_KEPT.
_repeats: dict[tuple, _Repeat] = {}
# The types a repeat may be: plain tensors, and each TVTensor class without attributes (Image,
# Video, Mask: the project's own camera and decoder send Images) once one has been sent.
_REPEATABLE: set[type] = {torch.Tensor}
_REPEATS_KEPT = 4096
# A repeat skips the limits' checks its header passed: under other limits, it is checked again.
limits.on_change(_repeats.clear)


def _one_plain_leaf(plan: Any) -> bool:
    """Whether a plan is one host tensor, plain or of a TVTensor class without attributes, with no
    autograd (wire.structure.is_bare_tensor)."""
    return not plan.has_cuda and is_bare_tensor(plan.tree)


def _remember_repeat(node: Any, output_id: str, obj: Any, leaf: Any, outgoing: Any) -> None:
    """Keep what `obj`'s message fixed (`_one_plain_leaf`), when its tensor's own bytes made the
    value (not a broadcast tensor narrowed, nor lazy bits resolved into a copy) and dora surely
    carries them."""
    t = plain_of(obj)  # a TVTensor's property reads go through its __torch_function__
    if (
        leaf.broadcast
        or t.requires_grad  # its header says so; a repeat's tensor is taken to need no autograd
        or t.is_neg()
        or t.is_conj()
        or not _surely_carried(node, output_id, outgoing.nbytes)
    ):
        return
    if len(_repeats) >= _REPEATS_KEPT:
        try:
            del _repeats[next(iter(_repeats))]
        except (RuntimeError, StopIteration, KeyError):  # another thread's send changed it meanwhile
            pass
    key = node_key(node)
    held = _held.get(key)
    if held is None:  # another thread forgot the node meanwhile: nothing to remember it by
        return
    layout = LeafLayout(leaf.dtype, leaf.shape, leaf.strides, leaf.nbytes, None, leaf.raw_span)
    _repeats[(key, output_id, type(obj), t.dtype, t.shape, t.stride())] = _Repeat(
        outgoing.metadata, outgoing.nbytes, t.element_size(), t.is_complex(), arrow_type_of(t.dtype), layout, held
    )
    _REPEATABLE.add(type(obj))


def _send_repeat_written(node: Any, output_id: str, t: torch.Tensor, metadata: dict | None, repeat: _Repeat) -> bool:
    """A repeat (`send` checked it is one) whose bytes tc writes into send_output_raw's buffer:
    a strided crop compacted in one pass (write_leaf), or a span from DORA_COPIES_BELOW up (no
    repeat today: `_surely_carried`), after the full path's storage check, which names a
    storage too small. `t`: the tensor as a plain alias."""
    nbytes = repeat.nbytes
    leaf = repeat.layout.with_plain_source(t)
    merged = {**metadata, **repeat.metadata} if metadata else dict(repeat.metadata)
    try:
        _write_and_send(node, output_id, nbytes, merged, lambda dest: write_leaf(leaf, dest, 0))
    except RuntimeError as e:
        translated = size_error(node, output_id, nbytes, e, merged)
        if translated is None:
            raise
        raise translated from None  # dora's words are in the message (see `send`)
    except UnicodeEncodeError as e:
        raise _unencodable(metadata, e) from None
    return True


def transport_for(node: Any, output_id: str, obj: Any) -> tuple[str, str]:
    """-> (transport, why): what ``send(node, output_id, obj)`` would use, and the reason (the
    consumers' placement, the data's device, ``TC_TRANSPORT``). Nothing is sent."""
    name, why = send_pipeline.resolve(
        make_plan(obj), "auto", output_id, lambda: route_of(node, output_id), node_key(node)
    )
    return (HOST if name == HOST_TO_GPU else name), why


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
    plain = values_of(plain_of(tensor), ())
    nbytes = plain.numel() * plain.element_size()
    check_route(node, output_id, nbytes, metadata)

    def write(dest: Destination) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # complex32 is "experimental"
            view = dest.tensor().view(plain.dtype).view(plain.shape)
        view.copy_(plain)  # the one pass; handles permutes, crops and devices

    try:
        _write_and_send(node, output_id, nbytes, dict(metadata or {}), write)
    except RuntimeError as e:
        translated = size_error(node, output_id, nbytes, e, metadata)
        if translated is None:
            raise
        raise translated from None  # dora's words are in the message (see `send`)


# ---------------------------------------------------------------------------- receiving


def receive(event: Any, *, copy: bool = False, device: Any = None) -> Any:
    """Decode the object of a dora INPUT event (see `tensor_codec.decode`, also for `device`);
    the input id names errors."""
    if not isinstance(event, dict) or event.get("type") != "INPUT":
        kind = event.get("type") if isinstance(event, dict) else type(event).__name__
        raise DecodeError(f"event.type: expected 'INPUT', got {kind!r:.80}")
    if "value" not in event or "metadata" not in event:
        missing = "value" if "value" not in event else "metadata"
        raise DecodeError(f"event: expected key {missing!r}, missing")
    # codec.decode's two steps, called from here: one Python frame less for every message.
    if not copy and device is None:
        obj = view_in_place(event["value"], event["metadata"], event.get("id"))  # most messages
        if obj is not None:
            return obj
    return decode_in_full(event["value"], event["metadata"], copy, device, event.get("id"))
