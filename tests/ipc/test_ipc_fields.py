"""The CUDA IPC transport's message fields, validated on any machine: hostile handles, sizes,
offsets, events, ledger references and producer identities are refused with a clear error."""

from __future__ import annotations

import base64
import os

import pytest

import tensor_codec as tc
from tensor_codec.cuda_ipc.identity import check_same_machine, host_identity, pid_namespace
from tensor_codec.wire.cuda_ipc import (
    IpcFields,
    buffer_metadata,
    message_metadata,
    parse_ipc_fields,
    parse_producer,
)

HANDLE = b"\x03c" + bytes(range(64))
EVENT = bytes(range(64, 128))
GOOD = IpcFields(HANDLE, 1024, 4096, EVENT, 7, 3)


def ipc_metadata(fields: IpcFields) -> dict:
    """One message's metadata keys as its producer writes them (`parse_ipc_fields`'s inverse)."""
    buffer = buffer_metadata(fields.handle, fields.offset, fields.event)
    return message_metadata({}, buffer, fields.size, fields.slot, fields.generation)


PRODUCER = {
    "host": "abc@box",
    "pidns": "pid:[4026531836]",
    "pid": 4242,
    "gpu": "GPU-3f2a1b4c-0000-1111-2222-333344445555",
    "ledger": "tc-4242-0123456789ab",
}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_fields_round_trip():
    assert parse_ipc_fields(ipc_metadata(GOOD), total=4096) == GOOD
    legacy = IpcFields(bytes(64), 0, 0, EVENT, 0, 1)
    assert parse_ipc_fields(ipc_metadata(legacy), total=0) == legacy
    expandable = IpcFields(b"\x03e" + bytes(40), 0, 8, EVENT, 0, 1)
    assert parse_ipc_fields(ipc_metadata(expandable), total=8).handle == expandable.handle


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tc.ipc.handle": None}, r"tc.ipc.handle: expected base64 of 3..1048576 bytes, got None"),
        ({"tc.ipc.handle": "not base64!"}, r"tc.ipc.handle: expected base64 text"),
        ({"tc.ipc.handle": b64(bytes(2))}, r"tc.ipc.handle: expected 3..1048576 bytes, got 2"),
        ({"tc.ipc.handle": b64(bytes(10))}, r"tc.ipc.handle: expected a 64-byte CUDA IPC handle .* got 10 bytes"),
        (
            {"tc.ipc.handle": b64(b"\x03x" + bytes(64))},
            r"tc.ipc.handle: expected a 64-byte CUDA IPC handle or torch's \[version\]\[c\|e\] form, got 66 bytes of "
            r"kind b'x'",
        ),
        ({"tc.ipc.handle": b64(b"\x03c" + bytes(70))}, r"got 72 bytes of kind b'c'"),
        (
            {"tc.ipc.handle": "A" * (2 << 20)},
            r"tc.ipc.handle: expected base64 of 3..1048576 bytes, got '2097152 characters'",
        ),
        ({"tc.ipc.offset": -1}, r"tc.ipc.offset: expected an integer 0..281474976710656, got -1"),
        ({"tc.ipc.offset": True}, r"tc.ipc.offset: expected an integer"),
        ({"tc.ipc.offset": 2**60}, r"tc.ipc.offset: expected an integer"),
        ({"tc.ipc.offset": 4104}, r"tc.ipc.offset: expected a multiple of 256 \(where a producer buffer .*got 4104"),
        ({"tc.ipc.size": 4095}, r"tc.ipc.size: expected 4096 bytes \(the end of the last leaf\), got 4095"),
        ({"tc.ipc.size": "4096"}, r"tc.ipc.size: expected an integer"),
        ({"tc.ipc.event": b64(bytes(63))}, r"tc.ipc.event: expected 64..64 bytes, got 63"),
        ({"tc.ipc.slot": 65536}, r"tc.ipc.slot: expected an integer 0..65535, got 65536"),
        ({"tc.ipc.generation": 0}, r"tc.ipc.generation: expected an integer 1..9223372036854775807, got 0"),
    ],
)
def test_hostile_fields_are_refused(change, message):
    metadata = {**ipc_metadata(GOOD), **change}
    with pytest.raises(tc.DecodeError, match=message):
        parse_ipc_fields(metadata, total=4096)


def test_missing_fields_are_refused():
    metadata = ipc_metadata(GOOD)
    for key in list(metadata):
        partial = {k: v for k, v in metadata.items() if k != key}
        with pytest.raises(tc.DecodeError, match=key.replace(".", r"\.")):
            parse_ipc_fields(partial, total=4096)


def test_producer_round_trip():
    producer = parse_producer(dict(PRODUCER))
    assert (producer.pid, producer.ledger) == (4242, "tc-4242-0123456789ab")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"pid": 0}, r"tc.header.producer.pid: expected a process id, got 0"),
        ({"pid": "4242"}, r"tc.header.producer.pid: expected a process id"),
        ({"gpu": "3f2a"}, r"tc.header.producer.gpu: expected a GPU UUID like 'GPU-3f2a...', got '3f2a'"),
        ({"gpu": "GPU-../../etc"}, r"tc.header.producer.gpu: expected a GPU UUID"),
        ({"ledger": "../../dev/shm/x"}, r"tc.header.producer.ledger: expected a ledger name like 'tc-<pid>-<12 hex>'"),
        ({"ledger": "tc-1-0123456789aB"}, r"tc.header.producer.ledger"),
        ({"host": ""}, r"tc.header.producer.host: expected a host identity string"),
        ({"host": "h" * 400}, r"tc.header.producer.host"),
        ({"extra": 1}, r"tc.header.producer: expected keys .*unexpected \['extra'\]"),
    ],
)
def test_hostile_producers_are_refused(change, message):
    with pytest.raises(tc.DecodeError, match=message):
        parse_producer({**PRODUCER, **change})


def test_producer_must_be_an_object_with_every_key():
    with pytest.raises(tc.DecodeError, match="tc.header.producer: expected an object, got list"):
        parse_producer([])
    with pytest.raises(tc.DecodeError, match=r"missing \['gpu'\]"):
        parse_producer({k: v for k, v in PRODUCER.items() if k != "gpu"})


def test_another_machine_is_refused_naming_both():
    producer = parse_producer({**PRODUCER, "host": "1111@gpu-box-a"})
    with pytest.raises(
        tc.DecodeError, match=r"comes from 'gpu-box-a' \(1111@gpu-box-a\) and this is 'gpu-box-b' \(2222@gpu-box-b\)"
    ):
        check_same_machine(producer, host="2222@gpu-box-b", pid=1)


def test_a_producer_of_another_pid_namespace_is_refused_naming_both_and_the_cure():
    """Across pid namespaces CUDA IPC fails where two processes share a pid, and the ledger tells
    receivers (and dead ones) apart by pid: refused before anything is claimed or opened."""
    producer = parse_producer({**PRODUCER, "host": host_identity(), "pid": 1, "pidns": "pid:[4000000001]"})
    with pytest.raises(
        tc.DecodeError,
        match=r"^tc.header.producer.pidns: CUDA IPC needs sender and receiver in one pid namespace, but the message "
        r"comes from 'pid:\[4000000001\]' and this process is in .*--pid=host.*transport='host'",
    ):
        check_same_machine(producer)


def test_the_sending_process_itself_is_refused():
    producer = parse_producer({**PRODUCER, "host": host_identity(), "pid": os.getpid(), "pidns": pid_namespace()})
    with pytest.raises(tc.DecodeError, match="cannot be opened by the process that sent it"):
        check_same_machine(producer)
    other = parse_producer({**PRODUCER, "host": host_identity(), "pid": os.getpid() + 1, "pidns": pid_namespace()})
    check_same_machine(other)  # another process of this machine: fine
