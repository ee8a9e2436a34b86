"""A CUDA IPC receiving process over the CPU stand-in backend (tests/support/ipc_fake_backend.py),
driven by JSON lines on stdin, one reply line each on stdout:

* ``{"decode": seq, "metadata": {...}, "numel": n}``: decode the message (its bytes must all be
  ``seq % 251``), drop it, and reply ``{"ack": seq}`` once its release reached the producer's
  ledger (or ``{"error": "..."}``);
* ``{"ops": true}``: reply ``{"ops": {...}}``, the stand-in's device operations so far.

Run as ``python -m tests.support.ipc_receiver`` from the repository root, with TC_FAKE_GPU_DIR
naming the producer's segment directory. Metadata arrives as JSON and goes through tc.decode's
own validation, as dora's would.
"""

from __future__ import annotations

import json
import sys
import time

import pyarrow as pa

import tensor_codec as tc
from tensor_codec.cuda_ipc import transport as cuda_ipc
from tests.support.ipc_fake_backend import FakeBackend

EMPTY = pa.array([], pa.uint8())


def settle(state, deadline_s: float = 10.0) -> None:
    """Give back every message whose views died (its marker completes at once in the stand-in)."""
    deadline = time.monotonic() + deadline_s
    while True:
        state.receiver.poll()
        if state.receiver.settled():
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the receiver did not give its messages back")
        time.sleep(0.0005)


def main() -> None:
    backend = FakeBackend()
    cuda_ipc.use_backend(backend)
    state = cuda_ipc._get_state()
    for line in sys.stdin:
        request = json.loads(line)
        if "ops" in request:
            reply = {"ops": dict(backend.ops)}
        else:
            seq = request["decode"]
            try:
                tensor = tc.decode(EMPTY, request["metadata"])
                if tensor.numel() != request["numel"] or not bool((tensor == seq % 251).all()):
                    raise AssertionError(f"message {seq}: wrong bytes")
                del tensor
                settle(state)
                reply = {"ack": seq}
            except Exception as e:
                reply = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
