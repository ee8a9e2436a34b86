"""Which transport an output's messages take, from where the dataflow places its consumers: the
rule of docs/transports.md, "Across machines: the transport is chosen per output" (`choose`,
`resolve`). The caller reads the consumers (an `OutputRoute`) from dora; this module knows
nothing of dora but its queues' rule (`queue_capacity`, docs/delivery.md, "The window must fit
the consumer's queue")."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import EncodeError
from .transports.names import AUTO, CHOICES, CUDA_IPC, HOST, HOST_TO_GPU
from .wire.cuda_ipc import HOLDERS

if TYPE_CHECKING:
    from .plan import Plan
    from .transports import Output

__all__ = [
    "ENV_TRANSPORT",
    "ENV_IPC_MIN_BYTES",
    "IPC_MIN_BYTES",
    "ipc_min_bytes",
    "MAX_IPC_CONSUMERS",
    "BACKPRESSURE",
    "queue_capacity",
    "Consumer",
    "OutputRoute",
    "choose",
    "resolve",
    "forced_transport",
]

log = logging.getLogger("tensor_codec")

ENV_TRANSPORT = "TC_TRANSPORT"
MAX_IPC_CONSUMERS = HOLDERS  # receivers one CUDA IPC ledger slot tracks

ENV_IPC_MIN_BYTES = "TC_IPC_MIN_BYTES"
# Messages under this many tensor bytes take host bytes instead of CUDA IPC (0: CUDA IPC at every
# size, until a GPU has measured the pooled path: docs/transports.md). bench/cuda_ipc.py measures
# the crossover and prints the value to set here (or in a node's env: block).
IPC_MIN_BYTES = 0


DORA_DEFAULT_QUEUE_SIZE = 10  # an input's queue_size when the dataflow gives none (dora 1.1)
BACKPRESSURE = "backpressure"  # the queue_policy that raises the bound (the other: drop_oldest)


def queue_capacity(queue_size: Any = None, queue_policy: Any = None) -> int:
    """How many messages a dora 1.1 input queue holds before it drops the oldest (docs/delivery.md's
    rule): dora's `QueuePolicy::effective_cap` (libraries/message/src/config.rs), applied per input."""
    size = queue_size if type(queue_size) is int and queue_size >= 0 else DORA_DEFAULT_QUEUE_SIZE
    if queue_policy == BACKPRESSURE:
        return max(size * 10, 100)
    return max(size, 1)


@dataclass(frozen=True)
class Consumer:
    node: str
    input: str
    machine: str | None  # None: the daemon without a machine id (or `dora run`)
    unknown: str | None = None  # why its placement cannot be known, if it cannot
    queue_size: int | None = None  # the input's `queue_size` as the dataflow gives it (None: dora's default)
    queue_policy: str | None = None  # its `queue_policy` (None: dora's default, drop_oldest)

    @property
    def capacity(self) -> int:
        """Messages the input's queue holds before dora drops the oldest (`queue_capacity`)."""
        return queue_capacity(self.queue_size, self.queue_policy)

    def describe_queue(self) -> str:
        """How the dataflow sets the input's queue, in words: "queue_size 10, drop_oldest (dora's default)"."""
        size = self.queue_size if self.queue_size is not None else f"{DORA_DEFAULT_QUEUE_SIZE} (dora's default)"
        policy = self.queue_policy if self.queue_policy is not None else "drop_oldest (dora's default)"
        return f"queue_size {size}, queue_policy {policy}"


@dataclass(frozen=True)
class OutputRoute:
    """Where an output's consumers run, as far as the dataflow says."""

    machine: str | None  # this node's machine id
    consumers: tuple[Consumer, ...]
    unknown: str | None = None  # why nothing can be said (no descriptor, no node id)

    def remote(self) -> list[Consumer]:
        return [c for c in self.consumers if c.unknown is None and c.machine != self.machine]


def _machine_name(machine: str | None) -> str:
    return f"machine {machine!r}" if machine is not None else "the default machine"


def forced_transport(explicit: str) -> str:
    """The transport a send asked for, with ``TC_TRANSPORT`` applied to ``"auto"``."""
    if explicit != AUTO:
        return explicit
    env = os.environ.get(ENV_TRANSPORT, "").strip()
    if not env:
        return AUTO
    if env not in CHOICES:
        raise EncodeError(f"{ENV_TRANSPORT}: expected one of {list(CHOICES)}, got {env!r}")
    return env


NO_CUDA = "no CUDA tensor in the message"


def ipc_min_bytes() -> int:
    """The size under which ``auto`` sends CUDA tensors as host bytes: ``TC_IPC_MIN_BYTES`` from
    the environment (read at each send, like ``TC_TRANSPORT``), else `IPC_MIN_BYTES`."""
    text = os.environ.get(ENV_IPC_MIN_BYTES, "").strip()
    if not text:
        return IPC_MIN_BYTES
    value = int(text) if text.isascii() and text.isdigit() else -1  # ASCII digits only: no sign, "1e6", "64KB", "²"
    if value < 0:
        raise EncodeError(f"{ENV_IPC_MIN_BYTES}: expected a whole number of bytes (>= 0), got {text!r:.80}")
    return value


def env_key() -> tuple[str | None, str | None]:
    """What of the environment `resolve` reads for ``auto``, as it stands: a send prepared under
    one value is prepared again under another."""
    return os.environ.get(ENV_TRANSPORT), os.environ.get(ENV_IPC_MIN_BYTES)


def resolve(requested: str, plan: Plan, output: Output, route: Callable[[], OutputRoute] | None) -> tuple[str, str]:
    """-> (transport, why) of a message of `plan` on `output`, `HOST_TO_GPU` included: what
    `send_pipeline.lay_out` uses and `tc.transport_for` reports. `route` is asked for ``auto``
    only, the plan's tensor bytes only where ``TC_IPC_MIN_BYTES`` could apply."""
    name = forced_transport(requested)
    if name == CUDA_IPC and not plan.has_cuda:
        name, why = HOST, f"{NO_CUDA}: cuda-ipc shares GPU memory, so host bytes carry it"
    elif name == AUTO:
        assert route is not None  # tc.encode, the one caller without a dataflow, refuses "auto" itself
        name, why = choose(route(), plan.has_cuda, lambda: plan.data_bytes)
    elif name != requested:
        return name, f"forced by {ENV_TRANSPORT}={name}"
    else:
        return name, "asked for by the code"
    # Logged once per choice and reason (a handful per output): what a user needs to see when a
    # deployment changes it.
    if (name, why) not in output.announced and len(output.announced) < 64:
        output.announced.add((name, why))
        log.info("output '%s': transport %s (%s)", output.name, name, why)
    return name, why


def choose(route: OutputRoute, has_cuda: bool, size: Callable[[], int] | None = None) -> tuple[str, str]:
    """-> (transport, why) for a message of this output (see the module's rule); `size` gives
    the message's tensor bytes (None: not known, no size rule)."""
    if not has_cuda:
        return HOST, NO_CUDA
    if route.unknown:
        return HOST, f"consumers' placement unknown: {route.unknown}"
    if not route.consumers:
        return HOST, "no consumer is wired to the output"
    for c in route.consumers:
        if c.unknown is not None:
            return HOST, f"consumer {c.node}/{c.input}: placement unknown ({c.unknown})"
    remote = route.remote()
    if remote:
        c = remote[0]
        return HOST, (
            f"consumer {c.node}/{c.input} runs on {_machine_name(c.machine)}, this node on "
            f"{_machine_name(route.machine)}: CUDA IPC cannot cross machines"
        )
    if len(route.consumers) > MAX_IPC_CONSUMERS:
        return HOST, f"{len(route.consumers)} consumers, CUDA IPC tracks at most {MAX_IPC_CONSUMERS}"
    where = f"all {len(route.consumers)} consumer(s) on this machine and the data on a GPU"
    floor = ipc_min_bytes()
    if floor and size is not None:
        if size() < floor:
            # The reason names the floor, not the size: it is logged once per reason.
            return HOST_TO_GPU, (
                f"{where}, but under {ENV_IPC_MIN_BYTES}={floor} bytes: host bytes, faster than CUDA IPC "
                "this small, restored onto the same GPU"
            )
        return CUDA_IPC, f"{where}, at least {ENV_IPC_MIN_BYTES}={floor} bytes"
    return CUDA_IPC, where
