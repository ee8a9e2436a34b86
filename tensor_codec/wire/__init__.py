"""The wire format: what one message is, and the receiver's checks of it. docs/wire-format.md is
its specification; each of its sections has one module here (the table at its top):

* ``header.py``: the message's metadata key (``tc.header``: version, transport, leaves, tree),
  the header object <-> its text, the leaf table and the receiver's checks of it;
* ``header_json.py``: the header's strict JSON, its cost counted before it is parsed;
* ``structure.py``, ``tree.py``, ``kinds.py``: the tree (container tags, the receiver's checks and
  builder, namedtuple names), tensor kinds and TVTensor attributes;
* ``dtypes.py``: the dtype names on the wire;
* ``leaf.py``: how one tensor's bytes are laid out, and the reader's check;
* ``buffer.py``: the message buffer (offsets, alignments, zero padding) and the host value;
* ``cuda_ipc.py``: the CUDA IPC transport's fields;
* ``limits.py``: what one message may cost a receiver.

The package rests only on ``tensor_codec.errors`` (tests/codec/test_import_layers.py): it says
what a message is, never how one is made or moved.
"""
