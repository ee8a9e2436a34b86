"""`Output`: one output port of a node (`Link.output(name)`), and the one path its messages take
into dora: a message of a signature kept goes by its `Prepared`; any other is planned, laid out
and checked by the send pipeline, and prepares its signature. `_emit` then hands dora the bytes
and translates dora's errors, once for every kind of message. docs/transports.md, "Host bytes
through dora", says which primitive sends what and what a signature is. Between messages a dora
node waits in dora's event loop, so every step runs with the CPU's caches cold and each Python
call costs a microsecond or two: the prepared path is a few attribute reads and one call per step.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import torch

from .. import limits as codec_limits
from .. import send_pipeline
from ..errors import EncodeError
from ..layout import Destination, LeafLayout, holds_dense_span, values_of, write_leaf
from ..plan import make_plan
from ..routing import MAX_IPC_CONSUMERS, OutputRoute, resolve
from ..transports import Output as TransportOutput
from ..transports.arrow_values import value_of
from ..transports.names import CHOICES as TRANSPORT_CHOICES
from ..transports.names import HOST, HOST_TO_GPU
from ..walk import plain_of
from ..wire.structure import is_bare_tensor
from . import limits as L
from . import user_metadata
from .descriptor import route_from_descriptor

if TYPE_CHECKING:  # transports load on first use (tests/codec/test_hygiene.py)
    from ..transports.host import HostTransport
    from .link import Link

__all__ = ["Output", "Prepared", "DORA_COPIES_BELOW"]

log = logging.getLogger("tensor_codec")

# Below this size dora's `send_output` (one memcpy of an Arrow array, and its receivers map the
# message faster) sends one dense host tensor faster than tc's threaded copy into
# `send_output_raw`'s buffer (bench/dora_latency.py, "dora's primitives"). An Output's
# `copies_below` (a benchmark sets it) starts here.
DORA_COPIES_BELOW = 32 << 20
PREPARED_MAX = 64  # signatures an output keeps (a stream has one, or a few in turn); the oldest goes
KEYS_KEPT = 256  # metadata key tuples an output remembers as checked (keys that change every message gain nothing)
_EMPTY = pa.array([], type=pa.uint8())
# A TVTensor's attributes read as a plain tensor's, without a second tensor object: an alias
# (as_subclass) costs a tensor's construction per message, and the Image's own reads would go
# through its __torch_function__.
_TORCH_FUNCTION_OFF = torch._C.DisableTorchFunctionSubclass


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the first message of a signature fixed for the next ones (see the module)."""

    metadata: dict  # the codec's keys (shared: merged into each message's own dict)
    nbytes: int
    element_size: int
    complex: bool  # the lazy conjugate bit exists only on complex tensors
    layout: LeafLayout  # no source: a prepared send must not keep a tensor alive
    generation: int  # of the codec's limits it was checked under (limits.generation; others: prepared again)


class Output:
    """One output port: where its consumers run, what dora carries on it, its prepared sends and
    the one path its messages take (see the module)."""

    def __init__(self, link: Link, name: str):
        self.link = link
        self.name = name
        self.copies_below = DORA_COPIES_BELOW
        # What the transports see of this output (transports.base.Output).
        self.sink = TransportOutput(name, self.receivers, receivers_per_process=self.receivers_per_process)
        self.prepared: dict[tuple, Prepared] = {}
        self._preparable: set[type] = {torch.Tensor}  # classes with a signature kept (see `send`)
        self._keys_ok: set[tuple] = set()  # metadata key tuples that passed (a stream repeats its keys)
        self._warned: set[tuple[int, str]] = set()  # (pool, kind) of the warnings logged

    @cached_property
    def route(self) -> OutputRoute:
        """Where the consumers of this output run, and their queues (read once)."""
        link = self.link
        return route_from_descriptor(link.descriptor, link.node_id, self.name, link.machine)

    @cached_property
    def pin(self) -> L.Pin | None:
        """Why dora keeps this output on its daemon path whatever the pool (None: it does not)."""
        try:
            entry = self.link.output_routing(self.name)
            return L.pin_of(self.route, entry.get("daemon_only") if isinstance(entry, dict) else None)
        except Exception as e:  # advice: never let it stop a send dora would make
            log.debug("output '%s': its routing could not be read: %s", self.name, e)
            return None

    def receivers(self) -> int:
        """How many inputs are wired to this output (at least 1, at most what CUDA IPC tracks)."""
        return min(max(len(self.route.consumers), 1), MAX_IPC_CONSUMERS)

    def receivers_per_process(self) -> int:
        """The most inputs one consumer node has wired to this output (1 where not said)."""
        consumers = self.route.consumers
        if len(consumers) < 2:  # most outputs; asked at every CUDA IPC publish
            return 1
        return min(max(Counter(c.node for c in consumers).values()), MAX_IPC_CONSUMERS)

    def limit(self, metadata_bytes: int = L.METADATA_RESERVE) -> L.SendLimit:
        """What dora 1.1 carries on this output for a message with `metadata_bytes` of metadata."""
        pool, source = self.link.pool
        return L.send_limit(pool, source, self.pin, metadata_bytes)

    def check(self, nbytes: int, metadata: dict | None = None) -> None:
        """Raise MessageTooLargeError if dora cannot carry `nbytes` with `metadata` here, naming
        the limit and what lifts it; warn once when it goes the slow way."""
        if self._surely_carried(nbytes):
            return
        limit = self.limit(L.metadata_bytes(metadata))
        if nbytes > limit.max_bytes:
            raise L.too_large(self.name, nbytes, limit, self.link.name)
        warning = L.slow_warning(self.name, nbytes, limit, self.link.name)
        if warning is not None and (limit.pool, warning[0]) not in self._warned:
            self._warned.add((limit.pool, warning[0]))
            log.warning("%s", warning[1])

    def _surely_carried(self, nbytes: int) -> bool:
        """Nothing to check or warn: well within the pool of an output not pinned, or below the
        size worth a warning on a pinned one."""
        if nbytes > L.SURELY_CARRIED:
            return False
        if self.pin is None:
            return nbytes + (nbytes >> 3) + L.POOL_SLACK <= self.link.pool[0]
        return nbytes < L.SLOW_WARN_BYTES

    def send(self, obj: Any, metadata: dict | None = None, *, transport: str = "auto") -> bool:
        """`tc.send` on this output: a message of a signature kept (`prepared`) goes by it unless its
        tensor's state asks for the full path (docs/transports.md, "A stream's prepared sends"); a
        host tensor goes as host bytes whatever transport was asked for, so a signature holds none."""
        if metadata is not None and (type(metadata) is not dict or tuple(metadata) not in self._keys_ok):
            self._check_metadata(metadata)
        if transport not in TRANSPORT_CHOICES:
            choices = list(TRANSPORT_CHOICES)
            raise EncodeError(f"unsupported transport: expected one of {choices}, got {transport!r:.80}")
        if type(obj) not in self._preparable or not self.prepared:
            return self._send_new(obj, metadata, transport)
        t = obj
        off = None if type(obj) is torch.Tensor else _TORCH_FUNCTION_OFF()
        if off is not None:
            off.__enter__()
        try:
            try:
                prepared = self.prepared.get((type(obj), t.dtype, t.shape, t.stride()))
            except RuntimeError:  # a tensor without strides (sparse, nested)
                prepared = None
            value = None
            if (
                prepared is None
                or prepared.generation != codec_limits.generation
                or not t.is_cpu
                or t.requires_grad
                or t.is_neg()
                or (prepared.complex and t.is_conj())
            ):
                prepared = None
            elif prepared.layout.raw_span and prepared.nbytes < self.copies_below:
                if holds_dense_span(t, prepared.nbytes, prepared.element_size):
                    value = value_of(t.data_ptr(), prepared.nbytes, t.dtype, t)  # dense: its bytes from data_ptr() up
                else:
                    prepared = None
        finally:
            if off is not None:
                off.__exit__(None, None, None)
        if prepared is None:
            return self._send_new(obj, metadata, transport)
        merged = {**metadata, **prepared.metadata} if metadata else dict(prepared.metadata)
        if value is not None:
            self._emit(prepared.nbytes, merged, metadata, value)
        else:  # a strided crop, compacted in one pass (an Image's from a plain alias: torch's copy)
            leaf = prepared.layout.with_plain_source(t if off is None else obj.as_subclass(torch.Tensor))
            self._emit(prepared.nbytes, merged, metadata, write=lambda dest: write_leaf(leaf, dest, 0))
        return True

    def _check_metadata(self, metadata: Any) -> None:
        keys = tuple(metadata) if isinstance(metadata, dict) else None
        if keys is None or not user_metadata.keys_pass(keys):
            user_metadata.refuse(metadata)  # raises, naming what is wrong, unless nothing is
            return  # (keys dora itself may refuse: checked again each time)
        if len(self._keys_ok) >= KEYS_KEPT:
            self._keys_ok.clear()
        self._keys_ok.add(keys)

    def _send_new(self, obj: Any, metadata: dict | None, transport: str) -> bool:
        """The full path: plan, lay out, check and send; then prepare the message's signature."""
        codec_limits.current()  # (installed: its generation is the one the layout checks under)
        generation = codec_limits.generation
        outgoing = send_pipeline.lay_out(obj, transport, self.sink, lambda: self.route)
        if outgoing is None:
            return False  # the output's in-flight policy dropped it (CUDA IPC past its cap)
        merged = dict(metadata) if metadata else {}
        merged.update(outgoing.metadata)
        nbytes = outgoing.nbytes
        with outgoing:  # until it has left, what the layout holds (a CUDA IPC slot) is freed on failure
            self.check(nbytes, merged)
            value = None if outgoing.in_value else _EMPTY
            if value is None and nbytes < self.copies_below and outgoing.transport.name == HOST:
                # dora copies one dense host span itself (None: not one, tc writes the bytes)
                value = cast("HostTransport", outgoing.transport).value_in_place(outgoing)
            if value is not None:
                self._emit(nbytes, merged, metadata, value)
            else:
                self._emit(nbytes, merged, metadata, write=lambda dest: outgoing.transport.write(outgoing, dest))
        if outgoing.transport.name == HOST and not outgoing.plan.has_cuda and is_bare_tensor(outgoing.plan.tree):
            self._prepare(obj, outgoing, generation)
        return True

    def _prepare(self, obj: Any, outgoing: Any, generation: int) -> None:
        """Keep what a sent message of one host tensor fixed for its signature's next ones, when
        its tensor's own bytes made the value (not a broadcast tensor narrowed, nor lazy bits
        resolved into a copy) and dora surely carries them."""
        leaf = outgoing.plan.leaves[0]
        t = plain_of(obj)
        if leaf.broadcast or t.requires_grad or t.is_neg() or t.is_conj() or not self._surely_carried(outgoing.nbytes):
            return
        if len(self.prepared) >= PREPARED_MAX:
            try:
                del self.prepared[next(iter(self.prepared))]
            except (RuntimeError, StopIteration, KeyError):  # another thread's send changed it meanwhile
                pass
        layout = LeafLayout(leaf.dtype, leaf.shape, leaf.strides, leaf.nbytes, None, leaf.raw_span)
        self.prepared[(type(obj), t.dtype, t.shape, t.stride())] = Prepared(
            outgoing.metadata, outgoing.nbytes, t.element_size(), t.is_complex(), layout, generation
        )
        self._preparable.add(type(obj))

    def _emit(
        self,
        nbytes: int,
        merged: dict,
        metadata: dict | None,
        value: pa.Array | None = None,
        write: Callable[[Destination], None] | None = None,
        *,
        plain: bool = False,
    ) -> None:
        """Hand dora one message: `value` (dora copies it) or `write` (tc fills dora's buffer of
        `nbytes`), with `merged` as its metadata; dora's errors translated (a size error names
        the limit and what lifts it; text UTF-8 cannot carry names the caller's field, except for
        `plain` messages, whose keys are dora's own)."""
        try:
            if write is None:
                self.link.node.send_output(self.name, value, merged)
            else:  # sent when the block ends without an error; no view of dora's buffer outlives it (it is reused)
                with self.link.node.send_output_raw(self.name, nbytes, metadata=merged) as sample:
                    if nbytes:
                        array = np.frombuffer(sample, dtype=np.uint8)
                        address = array.__array_interface__["data"][0]
                        dest = Destination(address, lambda: torch.from_numpy(array))  # noqa: F821  (del below)
                        try:
                            write(dest)
                        finally:
                            dest.release()
                            del array, dest
        except RuntimeError as e:
            meta = L.metadata_bytes(merged)
            translated = L.size_error(self.name, nbytes, e, meta, self.limit(meta), self.route, self.link.name)
            if translated is None:
                raise
            # dora's words are in the message; its error (eyre's location and a Rust stack
            # backtrace) is not chained: it would print below ours and bury it.
            raise translated from None
        except UnicodeEncodeError as e:
            if plain:
                raise
            raise user_metadata.unencodable(metadata, e) from None

    def send_plain(self, tensor: torch.Tensor, metadata: dict | None = None) -> None:
        """`tc.send_plain` on this output."""
        if not isinstance(tensor, torch.Tensor):
            raise EncodeError(f"tensor: expected a torch.Tensor, got {type(tensor).__qualname__}")
        if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
            raise EncodeError(
                f"tensor: expected a dense strided tensor with data, got layout {tensor.layout} on {tensor.device}"
            )
        plain = values_of(plain_of(tensor), ())
        nbytes = plain.numel() * plain.element_size()
        self.check(nbytes, metadata)

        def write(dest: Destination) -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # complex32 is "experimental"
                view = dest.tensor().view(plain.dtype).view(plain.shape)
            view.copy_(plain)  # the one pass; handles permutes, crops and devices

        self._emit(nbytes, dict(metadata or {}), metadata, write=write, plain=True)

    def transport_for(self, obj: Any) -> tuple[str, str]:
        """-> (transport, why): what `send(obj)` would use, and the reason. Nothing is sent."""
        name, why = resolve("auto", make_plan(obj), self.sink, lambda: self.route)
        return (HOST if name == HOST_TO_GPU else name), why

    def max_send_bytes(self, *, metadata_bytes: int | None = None, guaranteed: bool = False) -> int:
        """`tc.max_send_bytes` on this output."""
        limit = self.limit(L.METADATA_RESERVE if metadata_bytes is None else metadata_bytes)
        return limit.guaranteed_bytes if guaranteed else limit.max_bytes
