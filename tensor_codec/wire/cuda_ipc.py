"""The CUDA IPC transport's message fields (docs/wire-format.md, section 5a, which orders the
checks): the producer's identity in the header (`producer`) and the per-message `tc.ipc.*`
metadata keys, validated here as hostile input before the transport compares the identity with
its own (cuda_ipc/identity.py's `check_same_machine`).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import DecodeError
from .buffer import CUDA_IPC_ALIGNMENT

__all__ = [
    "IpcFields",
    "ProducerIdentity",
    "parse_ipc_fields",
    "buffer_key",
    "message_slot",
    "check_empty_value",
    "buffer_metadata",
    "message_metadata",
    "parse_producer",
    "check_gpu_uuid",
    "EVENT_HANDLE_BYTES",
    "HOLDERS",
]

EVENT_HANDLE_BYTES = 64  # cudaIpcEventHandle_t, carried in tc.ipc.event
# Receivers one message's ledger slot tracks (its holders, cuda_ipc/ledger.py): an output with
# more consumers goes as host bytes (routing.py).
HOLDERS = 16
CUDA_IPC_HANDLE_BYTES = 64
MAX_HANDLE_BYTES = 1 << 20  # an expandable-segments handle lists one entry per page
MAX_BUFFER_BYTES = 1 << 48
MAX_SLOTS = 65536
MAX_GENERATION = 2**63 - 1

KEY_HANDLE = "tc.ipc.handle"
KEY_OFFSET = "tc.ipc.offset"
KEY_SIZE = "tc.ipc.size"
KEY_EVENT = "tc.ipc.event"
KEY_SLOT = "tc.ipc.slot"
KEY_GENERATION = "tc.ipc.generation"
MESSAGE_KEYS = frozenset({KEY_HANDLE, KEY_OFFSET, KEY_SIZE, KEY_EVENT, KEY_SLOT, KEY_GENERATION})

_GPU = re.compile(r"^(GPU|MIG)-[0-9a-fA-F][0-9a-fA-F-]{7,63}$")
_LEDGER = re.compile(r"^tc-[0-9]{1,10}-[0-9a-f]{12}$")
_PRODUCER_KEYS = frozenset({"host", "pidns", "pid", "gpu", "ledger"})


@dataclass(frozen=True)
class IpcFields:
    handle: bytes  # torch's sharable handle of the producer's segment
    offset: int  # of the message buffer inside the segment
    size: int  # bytes of the message buffer
    event: bytes  # interprocess event recorded after the producer's last write
    slot: int
    generation: int


@dataclass(frozen=True)
class ProducerIdentity:
    """Who sent a CUDA IPC message (docs/wire-format.md, 5a, `producer`); the sender writes it
    into the header (`header`)."""

    host: str
    pidns: str
    pid: int
    gpu: str
    ledger: str

    def header(self) -> dict:
        # A literal, not dataclasses.asdict (about 35x slower): messages no plan memo covers
        # (structures, several leaves) build it at every send.
        return {"host": self.host, "pidns": self.pidns, "pid": self.pid, "gpu": self.gpu, "ledger": self.ledger}


def _int(metadata: dict, key: str, low: int, high: int) -> int:
    value = metadata.get(key)
    if type(value) is not int or not low <= value <= high:
        raise DecodeError(f"{key}: expected an integer {low}..{high}, got {value!r:.80}")
    return value


def _b64(metadata: dict, key: str, min_bytes: int, max_bytes: int) -> bytes:
    text = metadata.get(key)
    if type(text) is not str or len(text) > (max_bytes + 2) // 3 * 4:
        shown = text if type(text) is not str else f"{len(text)} characters"
        raise DecodeError(f"{key}: expected base64 of {min_bytes}..{max_bytes} bytes, got {shown!r:.80}")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise DecodeError(f"{key}: expected base64 text, got characters outside the alphabet or bad padding") from None
    if not min_bytes <= len(raw) <= max_bytes:
        raise DecodeError(f"{key}: expected {min_bytes}..{max_bytes} bytes, got {len(raw)}")
    return raw


def _check_handle(raw: bytes) -> None:
    """torch's sharable handle: a bare 64-byte cudaIpc handle, or [version][kind][payload] with
    kind 'c' (a 64-byte cudaIpc handle) or 'e' (expandable segments)."""
    kind = raw[1:2]
    if len(raw) == CUDA_IPC_HANDLE_BYTES or (kind == b"c" and len(raw) == 2 + CUDA_IPC_HANDLE_BYTES):
        return
    if kind == b"e" and len(raw) > 2:
        return
    raise DecodeError(
        f"{KEY_HANDLE}: expected a 64-byte CUDA IPC handle or torch's [version][c|e] form, "
        f"got {len(raw)} bytes of kind {kind!r:.80}"
    )


def check_empty_value(value: Any) -> None:
    """A CUDA IPC message's value is an empty Arrow array: its bytes stay on the GPU."""
    if not isinstance(value, pa.Array) or len(value) != 0:
        what = f"{len(value)} elements" if isinstance(value, pa.Array) else type(value).__name__
        raise DecodeError(f"value: expected an empty Arrow array (the bytes stay on the GPU), got {what}")


def parse_ipc_fields(metadata: dict, total: int) -> IpcFields:
    """The per-message fields; `total` is the buffer size the header's leaves need."""
    handle = _b64(metadata, KEY_HANDLE, 3, MAX_HANDLE_BYTES)
    _check_handle(handle)
    offset = _int(metadata, KEY_OFFSET, 0, MAX_BUFFER_BYTES)
    if offset % CUDA_IPC_ALIGNMENT:
        # A producer buffer starts at a block of torch's caching allocator (512-byte granules):
        # a message elsewhere would view its leaves misaligned, a fault on the GPU.
        raise DecodeError(
            f"{KEY_OFFSET}: expected a multiple of {CUDA_IPC_ALIGNMENT} (where a producer buffer starts in its "
            f"segment), got {offset}"
        )
    size = check_size(metadata, total)
    event = _b64(metadata, KEY_EVENT, EVENT_HANDLE_BYTES, EVENT_HANDLE_BYTES)
    slot, generation = parse_slot(metadata)
    return IpcFields(handle, offset, size, event, slot, generation)


def buffer_key(metadata: dict) -> tuple | None:
    """The buffer keys of a message exactly as they came (`buffer_metadata`'s), for a receiver
    that has parsed them before to know them again by; None where one is not of its type (then
    `parse_ipc_fields` names what is wrong)."""
    handle, offset, event = metadata.get(KEY_HANDLE), metadata.get(KEY_OFFSET), metadata.get(KEY_EVENT)
    if type(handle) is str and type(offset) is int and type(event) is str:
        return handle, offset, event
    return None


def parse_slot(metadata: dict) -> tuple[int, int]:
    """-> (slot, generation)."""
    return _int(metadata, KEY_SLOT, 0, MAX_SLOTS - 1), _int(metadata, KEY_GENERATION, 1, MAX_GENERATION)


def check_size(metadata: dict, total: int) -> int:
    """-> the message's size, which must be `total`: what the header's leaves need."""
    size = _int(metadata, KEY_SIZE, 0, MAX_BUFFER_BYTES)
    if size != total:
        raise DecodeError(f"{KEY_SIZE}: expected {total} bytes (the end of the last leaf), got {size}")
    return size


def message_slot(metadata: dict, total: int) -> tuple[int, int]:
    """-> (slot, generation) of a message whose buffer keys are known (`buffer_key`): what it
    still carries of its own, its size checked against `total` (`check_size`, `parse_slot`; a
    valid message is read in one step, with the caches cold between messages)."""
    size, slot, generation = metadata.get(KEY_SIZE), metadata.get(KEY_SLOT), metadata.get(KEY_GENERATION)
    if (
        type(size) is int
        and size == total
        and type(slot) is int
        and 0 <= slot < MAX_SLOTS
        and type(generation) is int
        and 1 <= generation <= MAX_GENERATION
    ):
        return slot, generation
    check_size(metadata, total)
    return parse_slot(metadata)


def buffer_metadata(handle: bytes, offset: int, event: bytes) -> dict:
    """The flat metadata keys every message written into one producer buffer carries alike (the
    producer's side of `parse_ipc_fields`, made once per buffer)."""
    return {
        KEY_HANDLE: base64.b64encode(handle).decode("ascii"),
        KEY_OFFSET: offset,
        KEY_EVENT: base64.b64encode(event).decode("ascii"),
    }


def message_metadata(codec: dict, buffer: dict, size: int, slot: int, generation: int) -> dict:
    """One message's metadata: the codec's keys, its buffer's (`buffer_metadata`) and its own."""
    return {**codec, **buffer, KEY_SIZE: size, KEY_SLOT: slot, KEY_GENERATION: generation}


def check_gpu_uuid(value: Any, where: str) -> None:
    """A GPU named in a header: what CUDA's UUIDs look like, nothing longer."""
    if type(value) is not str or not _GPU.fullmatch(value):
        raise DecodeError(f"{where}: expected a GPU UUID like 'GPU-3f2a...', got {value!r:.80}")


def parse_producer(value: Any, where: str = "tc.header.producer") -> ProducerIdentity:
    if type(value) is not dict:
        raise DecodeError(f"{where}: expected an object, got {type(value).__name__}")
    keys = set(value)
    if keys != _PRODUCER_KEYS:
        missing, extra = sorted(_PRODUCER_KEYS - keys), sorted(map(str, keys - _PRODUCER_KEYS))
        raise DecodeError(f"{where}: expected keys {sorted(_PRODUCER_KEYS)}, missing {missing}, unexpected {extra}")
    host, pidns, pid, gpu, ledger = (value[k] for k in ("host", "pidns", "pid", "gpu", "ledger"))
    if type(host) is not str or not 0 < len(host) <= 300:
        raise DecodeError(f"{where}.host: expected a host identity string, got {host!r:.80}")
    if type(pidns) is not str or len(pidns) > 100:
        raise DecodeError(f"{where}.pidns: expected a pid namespace string, got {pidns!r:.80}")
    if type(pid) is not int or not 0 < pid < 2**31:
        raise DecodeError(f"{where}.pid: expected a process id, got {pid!r:.80}")
    check_gpu_uuid(gpu, f"{where}.gpu")
    if type(ledger) is not str or not _LEDGER.fullmatch(ledger):
        raise DecodeError(f"{where}.ledger: expected a ledger name like 'tc-<pid>-<12 hex>', got {ledger!r:.80}")
    return ProducerIdentity(host, pidns, pid, gpu, ledger)
