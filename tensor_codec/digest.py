"""A content checksum of a whole message object, computed the same way by sender and receiver.

It covers what a receiver must get back: the structure (container types, dict keys, namedtuple
names, PackedSequence fields), every tensor's class, TVTensor attributes, dtype, shape,
requires_grad and logical values (bit-exact, NaNs included; strides and device are deliberately
left out: they depend on the transport and the receiver's DEVICE), and every plain value. Each
side computes it independently from its own Python objects, so a wrong type, attribute or byte
on arrival changes the digest. CRC-32 (about 3.5 GB/s here): it detects corruption, it is not a
defence against forgery.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from .layout import values_of
from .walk import fold, plain_of
from .wire.kinds import TV_ATTRIBUTES
from .wire.structure import DICT, LIST, NAMEDTUPLE, PACKED

__all__ = ["content_digest", "logical_bytes"]


def content_digest(obj: Any) -> str:
    """`obj` must be what tensor_codec encodes (tensor_codec.walk: the same types, depth 64);
    anything else raises tensor_codec.EncodeError naming its path."""
    state = [0]
    parents: list[str] = []  # tags of the containers around the node being fed

    def feed(data) -> None:
        state[0] = zlib.crc32(data, state[0])

    def feed_key(path: tuple) -> None:  # what goes before a child: its dict key or field name
        if parents:
            parent = parents[-1]
            if parent is DICT:
                key = path[-1]
                feed(f"k:{type(key).__name__}:{key!r}".encode())
            elif parent is PACKED:
                feed(f"{path[-1]}=".encode())

    def on_enter(x: Any, tag: str, path: tuple) -> None:
        feed_key(path)
        if tag is PACKED:
            feed(b"P")
        elif tag is NAMEDTUPLE:
            feed(f"N:{type(x).__name__}:{','.join(type(x)._fields)}".encode())
        elif tag is DICT:
            feed(f"D{len(x)}".encode())
        else:
            feed(f"{'L' if tag is LIST else 'U'}{len(x)}".encode())
        parents.append(tag)

    def on_container(x: Any, tag: str, values: list, path: tuple) -> None:
        parents.pop()

    def on_tensor(x: torch.Tensor, kind: Any, path: tuple) -> None:
        feed_key(path)
        _tensor(x, feed)

    def on_scalar(x: Any, path: tuple) -> None:
        feed_key(path)
        feed(f"S:{type(x).__name__}:{x!r}".encode())

    fold(obj, on_tensor, on_scalar, on_container, on_enter)
    return f"crc32:{state[0]:08x}"


def logical_bytes(obj: Any) -> int:
    """What content_digest reads of `obj`: its tensors' logical bytes (numel x item size, broadcast
    repeats included), found from shapes alone."""
    sizes: list[int] = []
    fold(obj, lambda x, kind, path: sizes.append(x.numel() * x.element_size()))
    return sum(sizes)


def _tensor(t: torch.Tensor, feed) -> None:
    attrs = []
    for name in TV_ATTRIBUTES:
        if hasattr(t, name):
            value = getattr(t, name)
            if name == "canvas_size":  # torchvision keeps what it was given: torch.Size or a tuple, one size
                value = tuple(int(v) for v in value)
            attrs.append(f"{name}={getattr(value, 'name', value)!r}")
    dtype = str(t.dtype).removeprefix("torch.")
    feed(f"T:{type(t).__name__}:{dtype}:{tuple(t.shape)}:{t.requires_grad}:{';'.join(attrs)}".encode())
    plain = values_of(plain_of(t), ())
    if plain.numel():  # an empty tensor's values feed nothing
        _feed_values(plain, feed)


# Logical values are fed in row-major order through blocks of at most this many bytes: a
# broadcast (stride-0) tensor is never densified whole, whatever its logical size.
_BLOCK_BYTES = 16 << 20


def _feed_values(t: torch.Tensor, feed) -> None:
    nbytes = t.numel() * t.element_size()
    if t.is_contiguous() or nbytes <= _BLOCK_BYTES or t.dim() == 0:
        flat = t.contiguous().reshape(-1)  # row-major; copies only a non-contiguous block
        if flat.device.type != "cpu":
            flat = flat.cpu()
        if flat.stride(0) != 1:  # a single element with an odd stride
            flat = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)
        feed(flat.view(torch.uint8).numpy().data)  # a memoryview over the bytes
        return
    row = nbytes // t.shape[0]
    step = max(1, _BLOCK_BYTES // max(row, 1))
    for start in range(0, t.shape[0], step):
        block = t[start : start + step]
        _feed_values(block if block.shape[0] > 1 or step > 1 else block[0], feed)
