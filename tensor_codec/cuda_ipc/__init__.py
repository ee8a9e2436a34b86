"""CUDA IPC: GPU tensors between processes of one machine, never through the host.

Its face is tc.ipc_configure / ipc_flush / ipc_stats / ipc_trim, which load the transport on
their first call. A map of its modules: docs/cuda-ipc-design.md (its opening "Status").
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
    """Cap the bytes `output_id` has in flight by CUDA IPC and say what `send` does past it
    (docs/transports.md, "CUDA IPC between processes of one machine"); a setting left None stays."""
    from .transport import configure  # the transport loads on first use (tests/codec/test_hygiene.py)

    configure(output_id, max_bytes=max_bytes_in_flight, on_full=on_full, timeout_s=timeout_s)


def ipc_flush(timeout_s: float = 10.0) -> bool:
    """Wait until receivers released everything this process sent with transport='cuda-ipc'
    (call before a producer exits: its GPU memory goes with it); False on timeout."""
    from .transport import flush

    return flush(timeout_s)


def ipc_stats() -> dict:
    """This process's CUDA IPC counters: per output sent (``outputs``: bytes in flight, drops,
    waits, messages lost on the way), its message buffers (``pool``) and as a ``receiver``."""
    from .transport import stats

    return stats()


def ipc_trim() -> int:
    """Give this process's idle CUDA IPC message buffers back to torch's caching allocator; -> how
    many. Call it when a burst is over and the memory is wanted elsewhere (sending keeps them)."""
    from .transport import trim

    return trim()
