"""Stand-ins for dora's Node and the sample its `send_output_raw` returns."""

from __future__ import annotations


class FakeSample:
    """What `node.send_output_raw` returns: a context manager around a writable buffer."""

    def __init__(self, node, output_id, length, metadata):
        self.node, self.output_id, self.metadata = node, output_id, metadata
        self.buffer = bytearray(b"\xAA" * length)  # stale bytes, as a reused dora buffer has

    def __enter__(self):
        return self.buffer

    def __exit__(self, *exc):
        if exc[0] is None:
            self.node.sent.append((self.output_id, bytes(self.buffer), self.metadata))


class FakeNode:
    def __init__(self, pool: int | None = None, fail_with: str | None = None):
        self.pool, self.fail_with, self.sent = pool, fail_with, []

    def node_config(self):
        return {"shared_memory_pool_size": self.pool} if self.pool else {"inputs": {}}

    def send_output_raw(self, output_id, length, metadata=None):
        if self.fail_with:
            raise RuntimeError(self.fail_with)
        return FakeSample(self, output_id, length, metadata)
