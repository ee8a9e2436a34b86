"""encode / decode: an object <-> (Arrow value, flat metadata), through a chosen transport.

One way: send_pipeline.lay_out, then the transport writes into an Arrow buffer here (dora/output.py:
into dora's send buffer). Back: received.py compiles the header (cached), which views most messages
(one tensor) where they lie (`Compiled.view`) and has the transport materialize any other
(`Compiled.restore`)."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import torch

from . import received, send_pipeline
from .errors import EncodeError, UsageError
from .layout import Destination
from .transports import ENCODE_OUTPUT, Output, get_transport, transport_for_message
from .transports.arrow_values import view_of
from .transports.names import HOST
from .wire.header import read_metadata

if TYPE_CHECKING:  # transports load on first use (tests/codec/test_hygiene.py)
    from .transports.host import HostTransport

__all__ = ["encode", "decode"]

_UINT8 = pa.uint8()
_ENCODE = Output(ENCODE_OUTPUT, lambda: 1)
_EMPTY = pa.array([], type=_UINT8)  # immutable: every CUDA IPC message's value


def encode(obj: Any, transport: str = "host") -> tuple[pa.Array, dict]:
    """Turn `obj` into one message: ``(pyarrow.Array, metadata dict)``.

    Raises `EncodeError` naming the path of anything unsupported. Nothing the caller passed is
    retained: later in-place changes to `obj` do not change the message (``transport``: docs/transports.md).
    """
    if transport != HOST:
        get_transport(transport)  # an unknown name (and "auto": no dataflow here) is the caller's error
    outgoing = send_pipeline.lay_out(obj, transport, _ENCODE)
    if outgoing is None:
        raise EncodeError(f"output '{ENCODE_OUTPUT}': dropped by its in-flight policy")
    if not outgoing.in_value:  # CUDA IPC: the bytes are on the GPU, the metadata is this message's own
        return _EMPTY, outgoing.metadata
    if outgoing.transport.name == HOST:
        small = cast("HostTransport", outgoing.transport).small_copy(outgoing)  # most small messages
        if small is not None:
            return small, dict(outgoing.metadata)
    nbytes = outgoing.nbytes
    buf = pa.allocate_buffer(nbytes)  # Arrow's allocator aligns to 64 bytes
    if nbytes:
        dest = Destination(buf.address, lambda: torch.frombuffer(buf, dtype=torch.uint8))
        try:
            with outgoing:
                outgoing.transport.write(outgoing, dest)
        finally:
            dest.release()
    return pa.Array.from_buffers(_UINT8, nbytes, [None, buf]), dict(outgoing.metadata)


def decode(value: Any, metadata: Any, *, copy: bool = False, device: Any = None, name: str | None = None) -> Any:
    """Restore the object of one message, validating everything before reading data.

    By default tensors are zero-copy views of `value` where the layout allows; they are tracked
    (see `tc.scope`, `tc.release`, `tc.keep`) and must not be written in place. ``copy=True``
    returns tensors that own their memory. `device` ("cpu", "cuda", "cuda:1", a torch.device)
    restores every tensor onto that device with its exact strides (one copy of the whole
    message; such tensors own their memory), except where the message's bytes are there already:
    host bytes restored onto "cpu" are viewed as without `device` (``copy=True`` copies them).
    `name` (an input id) appears in error messages.
    """
    text = read_metadata(metadata)
    compiled = received.cached(text)
    target = None if device is None else _target_device(device)
    if compiled is None or compiled.nodes > received.SMALL_NODES:
        # A header not seen before, or a big tree (a small one seen before makes too few objects to
        # matter): parsed, compiled and built with the collector paused where the header is long.
        with _collector_paused() if len(text) > _PAUSE_ABOVE_CHARS else _NO_PAUSE:
            if compiled is None:
                compiled = received.compile_header(text, transport_for_message)
            if compiled.in_place is None:
                return compiled.restore(value, metadata, copy, target, name)
    if compiled.in_place is not None and not copy and device is None:
        # One tensor (most messages), a stream's first message too: viewed as the next ones will be.
        obj = compiled.view(value, name, view_of)
        if obj is not None:
            return obj
    return compiled.restore(value, metadata, copy, target, name)


# A header this short makes too few objects for the collector to matter (a young collection at
# most), and pausing it costs a few microseconds: a small new header is decoded without.
_PAUSE_ABOVE_CHARS = 4096
_NO_PAUSE = contextlib.nullcontext()
_pause_lock = threading.Lock()
_pausing = 0  # decodes in progress that hold the collector paused
_paused_by_us = False


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while one message is parsed, compiled and built.

    Those steps make up to `header_items` small objects (limits.py), none of them garbage, and
    each time the collector's thresholds trip it walks every object of the process: a header of
    65,000 items tripped it often enough to take 60-75% of the time. The work is bounded by the
    limits, so collection waits until it is done. Decodes on several threads share one pause:
    the first turns the collector off (if it was on), the last turns it back on. (An application
    that calls gc.disable() while a decode runs sees it enabled again when the decode ends.)"""
    global _pausing, _paused_by_us
    with _pause_lock:
        if _pausing == 0:
            _paused_by_us = gc.isenabled()
            if _paused_by_us:
                gc.disable()
        _pausing += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pausing -= 1
            if _pausing == 0 and _paused_by_us:
                _paused_by_us = False
                gc.enable()


def _target_device(device: Any) -> torch.device:
    try:
        target: torch.device | None = torch.device(device)
    except (RuntimeError, TypeError):
        target = None
    if target is None or target.type not in ("cpu", "cuda"):
        raise UsageError(f"device: expected None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if target.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device: {device!r} asked for, but CUDA is not available on this machine")
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", torch.cuda.current_device())
    if target.type == "cuda" and target.index >= torch.cuda.device_count():
        raise UsageError(
            f"device: expected cuda:0..cuda:{torch.cuda.device_count() - 1} on this machine, got {device!r}"
        )
    return target
