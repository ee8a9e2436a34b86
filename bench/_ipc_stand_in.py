"""The tests' CPU stand-in for the CUDA IPC backend (tests/support/ipc_fake_backend.py) installed in
a benchmark's process: each node of bench/_ipc_latency_node.py (`install`), and bench/cuda_ipc.py's
in-process measurement, where one process is producer and receiver (`in_one_process`).

Its "GPU" memory is memory-mapped files in the directory given, and CPU tensors count as on its
GPU: the codec takes the same CUDA IPC code paths as on a GPU, without one, and the time they take
is their Python cost."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def install(directory: str) -> Any:
    """The stand-in as this process's CUDA IPC backend, its segment files in `directory`, for the
    rest of the process (a node's lifetime) -> the backend (FakeBackend: it counts its operations)."""
    if str(ROOT) not in sys.path:  # `python bench/x.py` puts bench/ on the path, not the tests' root
        sys.path.append(str(ROOT))  # last: a PYTHONPATH's tensor_codec (compare_revisions.py) stays first
    from tensor_codec import plan
    from tensor_codec.cuda_ipc import transport
    from tests.support.ipc_fake_backend import FakeBackend

    backend = FakeBackend(directory=directory)
    transport.use_backend(backend)
    # Its "GPU" memory is CPU memory: without this the codec sends CPU tensors as host bytes.
    plan.on_gpu = lambda t: backend.device_index_of(t) is not None
    return backend


@contextlib.contextmanager
def in_one_process(directory: str) -> Iterator[Any]:
    """`install`, with this process allowed to read its own messages (the transport refuses a
    message from its own process; here one process plays both sides) -> the backend. Afterwards
    everything replaced is put back, the release ledger closed and the segment files removed, so
    the rest of the process runs as if it had never been installed."""
    import tensor_codec as tc
    from tensor_codec import plan
    from tensor_codec.cuda_ipc import identity, transport

    saved_on_gpu, saved_check = plan.on_gpu, transport.check_same_machine
    backend = install(directory)
    real_check = identity.check_same_machine
    transport.check_same_machine = lambda producer: real_check(producer, pid=-1)  # only the same-process refusal
    try:
        yield backend
    finally:
        tc.ipc_flush(10)  # the messages dropped last are given back before their ledger closes
        state = transport._state
        transport.use_backend(None)
        plan.on_gpu, transport.check_same_machine = saved_on_gpu, saved_check
        if state is not None and state.producer.has_ledger:
            state.producer.ledger.close()  # its /dev/shm file, else left until the process exits
        backend.close()
