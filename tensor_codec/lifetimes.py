"""Lifetimes of received zero-copy objects: what docs/api.md's failures 4 and 5 promise (each
message kept or released as one unit; a release checks each leaf's version counter, which its
views share, against the one recorded at hand-out). The leaves view memory the sender reuses once
every receiver has dropped it, and that every receiver of the message maps.
"""

from __future__ import annotations

import logging
import operator
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch

from .errors import ReleasedError, SharedViewWriteError, format_path
from .layout import clone_exact, leaf_view
from .tree import iter_leaves, leaf_paths, map_tensors

__all__ = ["Scope", "scope", "release", "keep", "register_message", "register_leaf", "is_borrowed"]

log = logging.getLogger("tensor_codec")


@dataclass(slots=True, eq=False, weakref_slot=True)  # eq=False: compared and hashed by identity
class Message:
    """One zero-copy decoded message: what it borrows and the leaves handed out from it. One is
    made per message received, with the caches cold (between messages): its fields are given, not
    computed, and it holds no lock of its own (`_lock` orders release against keep)."""

    name: str | None
    borrowed: Any  # None once released
    leaves: list[weakref.ref]  # weak references to the leaves as handed out
    versions: list[int]  # the leaves' version counters at hand-out
    locations: Sequence[int]
    layouts: list  # each leaf's dtype, shape and strides as handed out: keep never reads its live (mutable) ones
    tree: Any  # the received tree, for paths in error messages
    released: bool = field(default=False, init=False)

    def path(self, index: int) -> str:
        return format_path(leaf_paths(self.tree)[index])

    def describe(self) -> str:
        return f"input '{self.name}'" if self.name else "received message"

    def release(self) -> list[str]:
        """Detach every leaf; -> a description of each leaf written in place since hand-out."""
        written = []  # (leaf index, version at hand-out, version now)
        with _lock:
            if self.released:
                return []
            self.released = True  # first: a release re-entered from this thread (a finalizer) is a no-op
            for index, (ref, version) in enumerate(zip(self.leaves, self.versions)):
                leaf = ref()
                if leaf is None:
                    continue
                if type(leaf) is torch.Tensor and not leaf.requires_grad:
                    # Most leaves: no subclass to step around, no autograd to keep out of set_().
                    if leaf._version != version:
                        written.append((index, version, leaf._version))
                    leaf.set_()  # type: ignore[call-overload]  # no source: an empty storage (see below)
                    continue
                with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
                    now = leaf._version
                    # set_() with no source: an empty storage (torch's stubs list only the overloads with one).
                    torch.Tensor.set_(leaf)  # type: ignore[call-overload]
                if now != version:
                    written.append((index, version, now))
            self.borrowed = None
        # Described outside the lock: a path walks the received tree.
        return [
            f"{self.describe()} at `{self.path(index)}`: a zero-copy view was written in place "
            f"(version {version} -> {now})"
            for index, version, now in written
        ]


_VERSION = operator.attrgetter("_version")
# Orders a message's release against a keep of it in another thread. One for all messages: a
# release holds it for a version read and a set_() per leaf (what it found is described after),
# a keep only to take the message's buffer (it copies outside), so threads hardly meet on it, and
# no message pays for a lock. Re-entrant: a finalizer that releases, run by a set_() on this
# thread, must not wait for itself.
_lock = threading.RLock()

# id(leaf) -> (weakref to the leaf, its message, leaf index). Entries vanish with their leaf.
_handouts: dict[int, tuple[weakref.ref, Message, int]] = {}


class _Scopes(threading.local):
    """Each thread's stack of open scopes, there (empty) from the thread's first use: a receive
    outside any scope reads an empty list, where `getattr(local, "scopes", None)` raised and
    caught an AttributeError inside, a microsecond or more of every such receive."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []


_local = _Scopes()


class _HandedOut(weakref.ref):
    """A weak reference to a handed-out leaf that knows its key in `_handouts`, where it removes
    the leaf's entry when the leaf dies (one object per leaf, made without a Python call)."""

    __slots__ = ("key",)
    key: int


def _forget(ref: _HandedOut) -> None:
    _handouts.pop(ref.key, None)


def register_message(
    name: str | None,
    borrowed: Any,
    leaves: list[torch.Tensor],
    plain_leaves: list[torch.Tensor],
    locations: list[int],
    layouts: list,
    tree: Any,
) -> Message:
    """Track the leaves handed out from one zero-copy message (`leaves`: as handed out, maybe
    TVTensors; `plain_leaves`: the same tensors as plain aliases, whose version counters they
    share and read without __torch_function__; `layouts`: the validated leaf table, with each
    leaf's dtype, shape and strides)."""
    # One weak reference per leaf serves both the message and the hand-out table (whose entry it
    # removes when the leaf dies). Every step runs per message, with the caches cold (between
    # messages): no Python call that can be spared.
    refs: list[weakref.ref] = []
    for leaf in leaves:
        ref = _HandedOut(leaf, _forget)
        ref.key = id(leaf)
        refs.append(ref)
    message = Message(name, borrowed, refs, list(map(_VERSION, plain_leaves)), locations, layouts, tree)
    for i, leaf in enumerate(leaves):
        _handouts[id(leaf)] = (refs[i], message, i)
    stack = _local.scopes
    if stack:
        stack[-1]._adopt(message, leaves)
    return message


_AT_START = (0,)  # the one leaf's location: it views `borrowed` from its start


def register_leaf(name: str | None, leaf: torch.Tensor, version: int, borrowed: Any, layouts: list, tree: Any) -> None:
    """`register_message` for a message that is one tensor viewing `borrowed` from its start
    (most messages: received.Compiled.view), in fewer steps: `leaf` as handed out (a plain
    tensor, or an Image), `version` its version counter, read by the caller while it was plain."""
    key = id(leaf)
    ref = _HandedOut(leaf, _forget)
    ref.key = key
    message = Message(name, borrowed, [ref], [version], _AT_START, layouts, tree)
    _handouts[key] = (ref, message, 0)
    stack = _local.scopes
    if stack:
        stack[-1]._adopt(message, (leaf,))


def _message_of(t: torch.Tensor) -> tuple[Message, int] | None:
    entry = _handouts.get(id(t))
    if entry is None or entry[0]() is not t:
        return None
    return entry[1], entry[2]


def is_borrowed(t: torch.Tensor) -> bool:
    """Whether `t` is a live zero-copy leaf of a received message."""
    found = _message_of(t)
    return found is not None and not found[0].released


def _raise_problems(problems: list[str]) -> None:
    if problems:
        raise SharedViewWriteError(
            "; ".join(problems) + ". Received views share memory with the sender and every other receiver: copy before "
            "writing (tc.keep(obj), tensor.clone(), or tc.receive(event, copy=True))."
        )


class Scope:
    """Releases every message received inside it when it ends (see module doc)."""

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._leaves: list[torch.Tensor] = []  # strong: a leaf written then dropped is still checked

    def __enter__(self) -> Scope:
        _local.scopes.append(self)
        return self

    def _adopt(self, message: Message, leaves: Sequence[torch.Tensor]) -> None:
        """Release `message` with this scope, and check its `leaves` (as handed out) then."""
        self._messages.append(message)
        self._leaves.extend(leaves)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack = _local.scopes
        if stack and stack[-1] is self:
            stack.pop()
        elif self in stack:  # exited out of order (generators, threads): removed wherever it is
            stack.remove(self)
        problems = [problem for message in self._messages for problem in message.release()]
        self._messages.clear()
        self._leaves.clear()
        if problems and exc_type is not None:
            # Do not mask the exception already on its way; still say what was found.
            log.error("while leaving a tensor_codec scope: %s", "; ".join(problems))
        else:
            _raise_problems(problems)


def scope() -> Scope:
    """``with tc.scope(): ...``: release everything received inside when the block ends."""
    return Scope()


def release(obj: Any) -> None:
    """Release every received message behind `obj` now (all of their parts, not only `obj`'s)."""
    hits = [_message_of(t) for _, t in iter_leaves(obj) if isinstance(t, torch.Tensor)]
    messages = dict.fromkeys(hit[0] for hit in hits if hit is not None)  # each once, in order found
    _raise_problems([problem for message in messages for problem in message.release()])


def keep(obj: Any) -> Any:
    """A copy of `obj` that owns its memory, made as one unit (see module doc)."""
    copies: dict[int, torch.Tensor] = {}

    def copy(plain: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
        hit = _message_of(original)
        if hit is not None:
            message, index = hit
            block = copies.get(id(message))
            if block is None:
                with _lock:  # a release in another thread cannot interleave
                    borrowed = message.borrowed  # still set unless released
                if message.released or borrowed is None:
                    raise ReleasedError(
                        f"{message.describe()} at `{message.path(index)}`: the message was "
                        "already released; call tc.keep() inside the scope that received it"
                    )
                # Copied outside the lock: holding `borrowed` keeps its memory from going back to
                # dora (which reuses it only once every reference is dropped), released or not.
                if not isinstance(borrowed, torch.Tensor):  # a value DLPack views (base.Materialized)
                    borrowed = torch.from_dlpack(borrowed)
                block = copies[id(message)] = borrowed.clone()
            layout = message.layouts[index]
            out = leaf_view(
                block.untyped_storage(), layout.dtype, message.locations[index], layout.shape, layout.strides
            )
        else:
            # Not a borrowed leaf (a small message's own copy, an ordinary tensor, a view derived
            # from one): a copy with the same strides, broadcast dims kept (layout.clone_exact).
            out = clone_exact(plain)
        if plain.requires_grad:
            out.requires_grad_(True)
        return out

    return map_tensors(copy, obj)
