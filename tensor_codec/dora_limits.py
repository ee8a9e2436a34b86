"""What a dora route can carry, checked before sending, so big messages never fail obscurely.

dora 1.1 publishes an output through the node's shared-memory pool when the message fits in it
(``shared_memory_pool_size`` in the dataflow YAML, else ``DORA_NODE_SHM_POOL_SIZE``, else 8 MiB).
A bigger message falls back to the daemon path, which is slow (measured: 16 MB took ~95 ms
instead of ~2 ms) and refuses messages whose encoded size passes 64 MiB; the encoding adds 1/8,
so payloads over about 59.6 MiB fail there with "exceeding the 67108864-byte daemon transport
limit". `check_route` raises `MessageTooLargeError` for those before anything is written and
warns once per output for the slow case; both name ``shared_memory_pool_size`` and the size needed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from typing import Any, Iterator

from .errors import MessageTooLargeError

__all__ = ["DEFAULT_POOL_BYTES", "DAEMON_PATH_MAX_PAYLOAD", "pool_size", "check_route", "suggested_pool"]

log = logging.getLogger("tensor_codec")

DEFAULT_POOL_BYTES = 8 << 20
DAEMON_LIMIT_BYTES = 64 << 20
# Encoded size on the daemon path is 9/8 of the payload plus framing; keep 64 KiB of margin.
DAEMON_PATH_MAX_PAYLOAD = DAEMON_LIMIT_BYTES * 8 // 9 - (64 << 10)

# Warn once per (node, output, pool). Keyed by id: dora's Node supports neither weak references
# nor attributes, and holding the node would keep it (and its outputs) alive past its user's last
# reference. A reused id can at worst skip a duplicate warning.
_warned: set[tuple[int, str, int]] = set()


def pool_size(node: Any) -> tuple[int, str]:
    """-> (bytes, where the value comes from) for this node's shared-memory pool.

    Read on every call, not cached: `node.node_config()` costs about a microsecond.
    """
    try:
        config = node.node_config()
    except Exception:  # a mock or an older dora: fall through to env / default
        config = None
    if isinstance(config, dict) and isinstance(config.get("shared_memory_pool_size"), int):
        return config["shared_memory_pool_size"], "the dataflow YAML"
    env = os.environ.get("DORA_NODE_SHM_POOL_SIZE", "")
    if env.isdigit():
        return int(env), "DORA_NODE_SHM_POOL_SIZE"
    return DEFAULT_POOL_BYTES, "dora's default"


def _node_id() -> str:
    match = re.search(r"^node_id:\s*(\S+)", os.environ.get("DORA_NODE_CONFIG", ""), re.MULTILINE)
    return match.group(1) if match else "<this node>"


def suggested_pool(nbytes: int) -> str:
    """A pool setting that holds two such messages in flight, as YAML text (power-of-two MB)."""
    mb = 1
    while mb << 20 < 2 * nbytes:
        mb *= 2
    return f"{mb}MB"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB ({n} bytes)"


def check_route(node: Any, output_id: str, nbytes: int) -> None:
    pool, source = pool_size(node)
    if nbytes <= pool:
        return
    advice = (
        f"set `shared_memory_pool_size: {suggested_pool(nbytes)}` (at least {_mib(nbytes)}) on node "
        f"'{_node_id()}' in the dataflow YAML"
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
            output_id, _mib(nbytes), _mib(pool), source, advice,
        )


def _remote_consumers(node: Any, output_id: str) -> list:
    from .routing import route_of

    try:
        return route_of(node, output_id).remote()
    except Exception:  # advice only: never let it hide dora's own error
        return []


@contextlib.contextmanager
def translate_send_errors(node: Any, output_id: str, nbytes: int) -> Iterator[None]:
    """Turn dora's size errors (should our estimate ever be off) into MessageTooLargeError."""
    try:
        yield
    except RuntimeError as e:
        if "transport limit" in str(e) or "exceeding" in str(e):
            remote = _remote_consumers(node, output_id)
            if remote:
                # A bigger pool does not help here: dora relays this output through its daemons.
                names = ", ".join(f"{c.node} on machine {c.machine!r}" for c in remote)
                raise MessageTooLargeError(
                    f"output '{output_id}': dora refused a message of {_mib(nbytes)}: the output has consumers on "
                    f"other machines ({names}) and dora relays it through its daemons, which carry at most "
                    f"{_mib(DAEMON_PATH_MAX_PAYLOAD)} per message. dora relays when the nodes cannot connect "
                    f"directly (daemons on loopback, or no routable address: see `dora daemon --zenoh-listen`); "
                    f"otherwise send smaller messages. dora said: {e}"
                ) from e
            pool, source = pool_size(node)
            raise MessageTooLargeError(
                f"output '{output_id}': dora refused a message of {_mib(nbytes)} (pool "
                f"{_mib(pool)} from {source}); set `shared_memory_pool_size: {suggested_pool(nbytes)}` "
                f"on node '{_node_id()}' in the dataflow YAML. dora said: {e}"
            ) from e
        raise
