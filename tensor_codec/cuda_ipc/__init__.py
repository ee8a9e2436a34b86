"""CUDA IPC: GPU tensors between processes of one machine, never through the host, in one package.

A newcomer's map (docs/cuda-ipc-design.md has the design):

* transport.py   the transport (lay out on the GPU, publish; validate, open, wait, view) and its
                 own API: configure (the cap on bytes in flight), flush, stats;
* identity.py    host, pid namespace and GPU identities, and the same-machine check;
* ledger.py      the shared-memory ledger through which receivers release what they read;
* progress.py    how far each receiver of an output got: when an unclaimed message was lost;
* producing.py   the sending process's bookkeeping (`ProducerBook`: slots, bytes in flight);
* inflight.py    the per-output cap and its wait / drop policy;
* receiving.py   the receiving process's bookkeeping (claims, releases, opened segments);
* handle_cache.py  opened segments, reused while their producer lives;
* pool.py        the sending process's message buffers and their events, exported once, reused;
* backend.py     the only code that touches the CUDA runtime (tests swap in a CPU stand-in).

The message fields and the producer's identity (`ProducerIdentity`), validated as hostile input
before anything is opened, are the wire format's: tensor_codec/wire/cuda_ipc.py.

Importing this package never initialises CUDA.
"""

from __future__ import annotations

from typing import Any

__all__ = ["use_backend"]


def use_backend(backend: Any) -> None:
    """Replace the device backend (tests: a CPU stand-in); None restores the CUDA one lazily."""
    from .transport import use_backend as _use

    _use(backend)
