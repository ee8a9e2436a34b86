"""The wire format: what one message is, and the receiver's checks of it. docs/wire-format.md is
its specification, section by section in these modules:

* ``header.py``: the message's metadata keys (``tc.version``, ``tc.transport``, ``tc.header``),
  the header object <-> its text, the leaf table and the receiver's checks of it;
* ``header_json.py``: the header's strict JSON, its cost counted before it is parsed;
* ``dtypes.py``: the dtype names on the wire;
* ``kinds.py``: tensor kinds (plain, the TVTensors) and their attributes;

The package rests only on ``tensor_codec.errors`` (tools/import_graph.py checks it): it says what
a message is, never how one is made or moved.
"""
