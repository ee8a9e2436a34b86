"""tensor_codec: move PyTorch tensors, TVTensors and nested structures through dora-rs.

    import tensor_codec as tc
    value, metadata = tc.encode(obj)            # -> (pyarrow.Array, dict)
    obj = tc.decode(value, metadata)            # the inverse
    tc.send(node, "output_id", obj, metadata)   # encode straight into dora's send buffer
    obj = tc.receive(event)                     # decode a dora INPUT event
    tc.send_plain(node, "image", hwc_tensor)    # flat bytes for non-codec consumers

See README.md and docs/wire-format.md.
"""

from .codec import decode, encode
from .dora_io import receive, send
from .errors import (
    CodecError,
    DecodeError,
    EncodeError,
    MessageTooLargeError,
    ReleasedError,
    SharedViewWriteError,
)
from .lifetimes import keep, release, scope
from .pinning import pin_memory
from .plain import plain_bytes, send_plain
from .tree import map_tensors, register_namedtuple
from .wire import VERSION as WIRE_VERSION

__version__ = "0.1.0"

__all__ = [
    "encode",
    "decode",
    "send",
    "receive",
    "send_plain",
    "plain_bytes",
    "scope",
    "release",
    "keep",
    "pin_memory",
    "map_tensors",
    "register_namedtuple",
    "CodecError",
    "EncodeError",
    "DecodeError",
    "MessageTooLargeError",
    "SharedViewWriteError",
    "ReleasedError",
    "WIRE_VERSION",
]
