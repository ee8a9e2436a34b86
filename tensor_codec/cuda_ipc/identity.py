"""Who and where a process is, for CUDA IPC: the same kernel (its boot id, docs/wire-format.md,
5a, plus the host name for people to read), the same pid namespace. CUDA IPC handles only open on
the machine that made them, so a receiver refuses a producer elsewhere, naming both, instead of
failing inside the driver. Which GPU is which, by UUID: tensor_codec/gpus.py.
"""

from __future__ import annotations

import functools
import os
import socket

from ..errors import DecodeError
from ..wire.cuda_ipc import ProducerIdentity

__all__ = [
    "host_identity",
    "pid_namespace",
    "pid_alive",
    "check_same_machine",
]


@functools.lru_cache(maxsize=1)
def host_identity() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:  # not Linux: fall back to the host name alone
        boot = ""
    return f"{boot}@{socket.gethostname()}" if boot else socket.gethostname()


def host_name(identity: str) -> str:
    """The human part of a host identity."""
    return identity.rsplit("@", 1)[-1]


@functools.lru_cache(maxsize=1)
def pid_namespace() -> str:
    """Process ids are only comparable inside one pid namespace (containers have their own)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _namespace(name: str) -> str:
    return repr(name[:80]) if name else "an unknown one (/proc/self/ns/pid could not be read)"


def pid_alive(pid: int) -> bool:
    """Whether a process of this pid namespace still exists (someone else's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_same_machine(producer: ProducerIdentity, *, host: str | None = None, pid: int | None = None) -> None:
    """CUDA IPC only works between processes of one kernel and one pid namespace, and never inside
    one process."""
    host = host_identity() if host is None else host
    if producer.host != host:
        raise DecodeError(
            f"tc.header.producer.host: CUDA IPC needs sender and receiver on one machine, but the "
            f"message comes from {host_name(producer.host)!r} ({producer.host}) and this is "
            f"{host_name(host)!r} ({host}); across machines send host bytes (transport='auto', the default, "
            f"does when the dataflow deploys the receiver on another machine; or transport='host')"
        )
    here = pid_namespace()
    if producer.pidns != here:
        raise DecodeError(
            f"tc.header.producer.pidns: CUDA IPC needs sender and receiver in one pid namespace, but the "
            f"message comes from {_namespace(producer.pidns)} and this process is in {_namespace(here)}: CUDA IPC "
            f"itself fails across pid namespaces where two processes share a pid, and the producer tells its "
            f"receivers apart, and the dead from the living, by pid; run both in one (docker: --pid=host, or "
            f"--pid=container:<the sender's>), or send host bytes (transport='host')"
        )
    if producer.pid == (os.getpid() if pid is None else pid):
        raise DecodeError(
            "tc.header.producer.pid: a CUDA IPC message cannot be opened by the process that sent it; "
            "inside one process pass tensors directly"
        )
