"""CUDA IPC: GPU tensors between processes of one machine, never through the host.

This package's face is tc.ipc_configure / ipc_flush / ipc_stats / ipc_trim, which load the
transport on their first call (importing this package never initialises CUDA). A map of its
modules: docs/cuda-ipc-design.md (its opening "Status"); the message fields are
tensor_codec/wire/cuda_ipc.py's.
"""

from __future__ import annotations

__all__ = ["ipc_configure", "ipc_flush", "ipc_stats", "ipc_trim"]


def ipc_configure(
    output_id: str,
    *,
    max_bytes_in_flight: int | None = None,
    on_full: str | None = None,
    timeout_s: float | None = None,
) -> None:
    """Cap the bytes one output has in flight with transport='cuda-ipc' (default 1 GiB) and say
    what `send` does past it: ``on_full="wait"`` (default; up to `timeout_s`, default 5 s, then
    `InFlightLimitError`) or ``"drop"`` (not sent, counted, logged; `send` returns False)."""
    from .transport import configure  # the transport loads on first use (tests/codec/test_hygiene.py)

    configure(output_id, max_bytes_in_flight=max_bytes_in_flight, on_full=on_full, timeout_s=timeout_s)


def ipc_flush(timeout_s: float = 10.0) -> bool:
    """Wait until receivers released everything this process sent with transport='cuda-ipc'
    (call before a producer exits: its GPU memory goes with it); False on timeout."""
    from .transport import flush

    return flush(timeout_s)


def ipc_stats() -> dict:
    """This process's CUDA IPC counters: per output sent (bytes in flight, peak, drops at the cap,
    waits, messages lost on the way: given up unclaimed, as dora dropped them),
    its message buffers (made, reused, idle) and as a receiver (claims, releases, opened
    segments and events, cache hits)."""
    from .transport import stats

    return stats()


def ipc_trim() -> int:
    """Give this process's idle CUDA IPC message buffers back to torch's caching allocator; ->
    how many. Sending keeps released buffers for the next messages (exported once, so a steady
    stream allocates nothing): call this when a burst is over and the memory is wanted elsewhere."""
    from .transport import trim

    return trim()
