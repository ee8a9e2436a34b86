"""What dora 1.1 can carry in one message, as functions of values (a route, a pool, a routing
entry, dora's error text): no node and no caches. Measured on dora-rs 1.1.0 in real dataflows
and read off its source (apis/rust/node: arrow_utils/ipc_encode.rs, node/mod.rs): the cap, the
pool and the daemon path, their numbers and when each applies (and which bound dora always
honours) are docs/transports.md, "dora's limits on one message"."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import MessageTooLargeError
from ..routing import BACKPRESSURE, OutputRoute

__all__ = [
    "ipc_stream_bytes",
    "daemon_payload",
    "pool_payload",
    "metadata_bytes",
    "suggested_pool",
    "Pin",
    "pin_of",
    "SendLimit",
    "send_limit",
    "too_large",
    "slow_warning",
    "size_error",
    "DEFAULT_POOL_BYTES",
    "CAP_PAYLOAD",
    "DAEMON_PATH_MAX_PAYLOAD",
    "METADATA_RESERVE",
    "SURELY_CARRIED",
    "SLOW_WARN_BYTES",
    "POOL_SLACK",
]

DEFAULT_POOL_BYTES = 8 << 20  # dora's shared-memory pool when neither the YAML nor the environment sets one
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
# Below this, and fitting the pool of an output dora does not pin, no limit is near: an Output's
# check returns at once (the daemon path carries it with up to 28 MiB of metadata).
SURELY_CARRIED = 32 << 20
# A pinned output's messages from this size on are worth a warning: the daemon path is slow.
SLOW_WARN_BYTES = 1 << 20
# Pool bytes a message needs beyond n + n/8, at most: padding (2 x 63 + 1), framing, chunk header.
POOL_SLACK = 127 + _IPC_FRAMING + SHM_CHUNK_OVERHEAD
# dora's ZENOH_STARTUP_GRACE (node/mod.rs, wait_for_grace): an output whose startup handshake took
# longer stays on the daemon path for the run; seen on a loaded machine only (docs/transports.md).
STARTUP_GRACE_MS = 500


def _round64(n: int) -> int:
    return (n + 63) & ~63


def ipc_stream_bytes(nbytes: int) -> int:
    """Bytes of the UInt8 Arrow IPC stream dora 1.1 makes of `nbytes` of payload (its `uint8_layout`):
    what the pool, the daemon path and the cap count."""
    return _round64((nbytes + 7) >> 3) + _round64(nbytes) + _IPC_FRAMING


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


# The most the daemon path carries with METADATA_RESERVE of metadata: 59,636,480 bytes.
DAEMON_PATH_MAX_PAYLOAD = daemon_payload()


def fits_pool(nbytes: int, pool: int, messages: int = 1) -> bool:
    """Whether `messages` messages of `nbytes` fit a pool of `pool` bytes at once."""
    return messages * (ipc_stream_bytes(nbytes) + SHM_CHUNK_OVERHEAD) <= pool


def pool_payload(pool: int) -> int:
    """The largest payload a pool of `pool` bytes holds (alone in it)."""
    return payload_within(pool - SHM_CHUNK_OVERHEAD)


def metadata_bytes(metadata: dict | None) -> int:
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


def suggested_pool(nbytes: int, messages: int = 2) -> str:
    """A pool setting that holds `messages` such messages at once (two by default: the one a
    receiver still holds and the next), as YAML text: a power of two in MB, which dora reads as
    MiB."""
    mb = 1
    while not fits_pool(nbytes, mb << 20, messages):
        mb *= 2
    return f"{mb}MB"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB ({n} bytes)"


def _set_pool(node: str, nbytes: int, messages: int = 2) -> str:
    setting = suggested_pool(nbytes, messages)
    return f"set `shared_memory_pool_size: {setting}` on node '{node}' in the dataflow YAML"


@dataclass(frozen=True)
class Pin:
    """Why dora keeps an output on its daemon path whatever the pool, and what lifts that.
    `cure` has ``{limit}`` where the daemon path's limit goes."""

    why: str
    cure: str


def _inputs(consumers: list) -> str:
    return ", ".join(f"{c.node}/{c.input}" for c in consumers)


def pin_of(route: OutputRoute, daemon_only: Any) -> Pin | None:
    """The pin of an output: what the daemon decided (`daemon_only` from DORA_NODE_CONFIG's
    ``output_routing``: True, False, or None when it did not say), explained by the consumers
    the dataflow gives it."""
    if daemon_only is False:
        return None
    backpressure = [c for c in route.consumers if c.queue_policy == BACKPRESSURE]
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


@dataclass(frozen=True)
class SendLimit:
    """The most payload bytes one message on an output can carry, and why."""

    # What can ever go: past the daemon path's limit only while dora's pool has room and the
    # output's startup handshake completed (`STARTUP_GRACE_MS`).
    max_bytes: int
    guaranteed_bytes: int  # what goes whatever happens: the daemon path's limit
    limit: str  # that limit in words
    pool: int
    pool_source: str
    pin: Pin | None  # None: messages that fit the pool take it


def send_limit(pool: int, pool_source: str, pinned: Pin | None, metadata_bytes: int = METADATA_RESERVE) -> SendLimit:
    """The one rule: what dora 1.1 carries on an output with this pool and pin, for a message
    with `metadata_bytes` of metadata; `limit` says why a bigger message cannot go."""
    daemon = daemon_payload(metadata_bytes)
    daemon_words = f"its daemon path, which carries at most {_mib(daemon)} per message (64 MiB with the metadata)"
    if pinned is not None:
        why = f"dora sends this output on {daemon_words}, whatever the pool: {pinned.why}"
        return SendLimit(daemon, daemon, why, pool, pool_source, pinned)
    fits = pool_payload(pool)
    if fits >= CAP_PAYLOAD:
        why = (
            "dora caps one message at an Arrow IPC stream of 256 MiB (the payload and 1/8 more for the validity "
            f"bitmap it writes): at most {_mib(CAP_PAYLOAD)} of payload, whatever the pool"
        )
        return SendLimit(CAP_PAYLOAD, daemon, why, pool, pool_source, None)
    why = (
        f"it does not fit this node's shared_memory_pool_size of {_mib(pool)} (from {pool_source}; it holds at most "
        f"{_mib(fits)} of payload, with dora's 1/8 validity bitmap), so dora would send it on {daemon_words}"
    )
    return SendLimit(max(fits, daemon), daemon, why, pool, pool_source, None)


def too_large(output_id: str, nbytes: int, limit: SendLimit, node: str) -> MessageTooLargeError:
    """The error for a message of `nbytes` over `limit`, naming the limit and what lifts it."""
    if limit.pin is not None:
        cure = "To carry it, " + limit.pin.cure.format(limit=_mib(limit.max_bytes))
    elif nbytes > CAP_PAYLOAD:  # (over a limit that is the cap, the message is over the cap)
        cure = "No dora setting raises this cap: send the data in parts (several messages, or several outputs)"
    else:
        most = _mib(limit.max_bytes)
        cure = f"To carry it, {_set_pool(node, nbytes)} (two such messages at once), or send at most {most}"
    return MessageTooLargeError(
        f"output '{output_id}': dora cannot carry a message of {_mib(nbytes)}: {limit.limit}. {cure}"
    )


def slow_warning(output_id: str, nbytes: int, limit: SendLimit, node: str) -> tuple[str, str] | None:
    """For a message dora carries: (kind, warning) when it goes the slow way (pinned to the
    daemon path, too big for the pool) or fits only an empty pool; None otherwise. An output
    warns once per kind and pool."""
    pool = limit.pool
    if limit.pin is not None:
        if nbytes < SLOW_WARN_BYTES:
            return None
        why = limit.pin.why
        return "pinned", f"output '{output_id}': messages of {_mib(nbytes)} take dora's slow daemon path: {why}"
    if not fits_pool(nbytes, pool):
        return "slow", (
            f"output '{output_id}': message of {_mib(nbytes)} does not fit this node's shared_memory_pool_size of "
            f"{_mib(pool)} (from {limit.pool_source}) and takes dora's slow fallback path; {_set_pool(node, nbytes)}"
        )
    if nbytes > daemon_payload(0) and not fits_pool(nbytes, pool, 2):
        return "alone", (
            f"output '{output_id}': a message of {_mib(nbytes)} fits this node's shared_memory_pool_size of "
            f"{_mib(pool)} (from {limit.pool_source}) only alone: while a receiver still holds the previous one (a "
            "`for event in node` loop does until the next event), dora sends the next on its daemon path, which "
            f"refuses messages over {_mib(daemon_payload(0))}; {_set_pool(node, nbytes)}"
        )
    return None


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
    output_id: str, nbytes: int, error: BaseException, meta_bytes: int, limit: SendLimit, route: OutputRoute, node: str
) -> MessageTooLargeError | None:
    """dora's own size error (should the estimate ever be off, the pool be full or the output's
    startup handshake have failed) as a MessageTooLargeError naming the limit hit and what lifts
    it; None for any other error (the caller re-raises it as it is)."""
    hit = _limit_hit(str(error), nbytes, meta_bytes)
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
    cause = _daemon_cause(output_id, nbytes, meta_bytes, limit, route, node)
    return MessageTooLargeError(f"{head} on its daemon path: {cause} dora said: {said}")


def _daemon_cause(output_id: str, nbytes: int, meta_bytes: int, limit: SendLimit, route: OutputRoute, node: str) -> str:
    """Why a message went on the daemon path, and what lets it through, in words."""
    carried = _mib(daemon_payload(meta_bytes))
    if limit.pin is not None:
        return f"this output goes there whatever its pool: {limit.pin.why}; {limit.pin.cure.format(limit=carried)}."
    remote = route.remote()
    if remote:  # the daemon's routing was not given to say so (an older dora): the descriptor does
        names = ", ".join(f"{c.node} on machine {c.machine!r}" for c in remote)
        return (
            f"the output has consumers on other machines ({names}) and dora relays it through its daemons, which "
            f"carry at most {carried} per message. dora relays when the nodes cannot connect directly (daemons on "
            f"loopback, or no routable address: see `dora daemon --zenoh-listen`); otherwise send smaller messages."
        )
    pool = limit.pool
    if not fits_pool(nbytes, pool):
        return (
            f"it does not fit this node's shared_memory_pool_size of {_mib(pool)} (from {limit.pool_source}), and "
            f"the daemon path carries at most {carried} per message: {_set_pool(node, nbytes)} (two such messages "
            "at once)."
        )
    # dora fell back although the pool should have held it, and says neither why: a full pool or a
    # failed startup handshake. Both are named, with what tells them apart (a failed handshake
    # refuses every such message of the run).
    # Messages the pool may hold at once: the one sent, and per consumer input one held and its queue's.
    in_flight = 1 + sum(c.capacity + 1 for c in route.consumers) if route.consumers else 2
    if fits_pool(nbytes, pool, in_flight):
        room = (
            "make room in it (receivers that drop messages sooner, a smaller queue_size, fewer big messages on the "
            "node's other outputs) or raise it"
        )
    else:
        room = (
            f"{_set_pool(node, nbytes, in_flight)} ({in_flight} such messages: the one being sent, and per consumer "
            "input one its receiver holds and its queue_size queued)"
        )
    return (
        f"dora fell back to its daemon path although this node's shared_memory_pool_size of {_mib(pool)} (from "
        f"{limit.pool_source}) should have held the message. That path carries at most {carried} per message, "
        f"and that much always goes (`tc.max_send_bytes(node, '{output_id}', guaranteed=True)`); to have every "
        "message go, send no more (several messages, or several outputs). dora falls back when the pool had no room "
        f"for it at that moment: a message stays in it while a receiver holds it or dora queues it for one (one pool "
        f"for all the node's outputs); to carry it, {room}. It also falls back for the whole run when the output's "
        f"startup handshake with its consumers did not complete within dora's {STARTUP_GRACE_MS} ms (a loaded "
        "machine): then every message past that path's limit is refused from the first, and only a fresh start "
        "lifts it (stop and run the dataflow again)."
    )
