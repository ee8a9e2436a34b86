"""The one stand-in for dora's Node the tests use: dora.testing.MockNode (dora-rs 1.1), which has
every method of dora.Node, with what this project needs on top of it."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np
from dora.testing import MockNode

from tensor_codec.wire.buffer import UNITS


class FakeSample:
    """What `node.send_output_raw` returns: a context manager around a writable buffer, sent (put
    in `node.sent`) when the block ends without an error."""

    def __init__(self, node: FakeNode, output_id: str, length: int, metadata: dict | None):
        self.node, self.output_id, self.metadata = node, output_id, metadata
        self.buffer = bytearray(b"\xaa" * length)  # stale bytes, as a reused dora buffer has

    def __enter__(self):
        return self.buffer

    def __exit__(self, *exc):
        if exc[0] is None:
            self.node._record(self.output_id, bytes(self.buffer), self.metadata)


class FakeNode(MockNode):
    """dora.testing.MockNode, plus:

    - `send_output_raw`, which MockNode cannot offer: a FakeSample, whose bytes are sent when its
      block ends;
    - `sent`: every message sent, by `send_output` or `send_output_raw`, as (output id, value or
      bytes, metadata), in order (MockNode's `outputs` keeps the values only, per output); a
      non-empty unsigned integer array sent is recorded as its bytes, copied as dora copies them;
    - `fail`: every send raises RuntimeError(fail) (the first `fail_times` only, if given), as dora
      does when it refuses a message or the daemon is gone;
    - the node config from keywords: `node_id`, `inputs` and `outputs` (ids), `pool`
      (shared_memory_pool_size); `descriptor`: what `dataflow_descriptor()` returns;
    - `events`, read in order by `next`, `try_recv` and iteration (each call to `next` and
      `try_recv` recorded in `calls`, with its timeout): an INPUT event dict or (input id, value),
      or None, where the stream ends (`try_recv` does not take it: the stream is not over until a
      blocking read finds it so). Unlike MockNode, no STOP is added: the events are the script.
    """

    def __init__(
        self,
        events: Iterable[dict | tuple | None] = (),
        *,
        node_id: str | None = None,
        inputs: Iterable[str] = (),
        outputs: Iterable[str] = (),
        pool: int | None = None,
        descriptor: Any = None,
        fail: str | None = None,
        fail_times: int | None = None,
    ):
        config: dict[str, Any] = {"inputs": {i: {} for i in inputs}, "outputs": list(outputs)}
        if node_id is not None:
            config["node_id"] = node_id
        if pool is not None:
            config["shared_memory_pool_size"] = pool
        super().__init__([], node_config=config, dataflow_descriptor=descriptor)
        self.descriptor = descriptor
        self.events = deque(_event(e) for e in events)
        self.calls: list[tuple[str, float | None]] = []
        self.sent: list[tuple[str, Any, dict | None]] = []
        self.fail, self.fail_times = fail, fail_times

    # ---------------------------------------------------------------------------- sending
    def _refuse(self) -> None:
        if self.fail is None or self.fail_times == 0:
            return
        if self.fail_times is not None:
            self.fail_times -= 1
        raise RuntimeError(self.fail)

    def _record(self, output_id: str, value: Any, metadata: dict | None) -> None:
        self.sent.append((output_id, value, metadata))
        super().send_output(output_id, value, metadata)

    def send_output(self, output_id: str, data: Any, metadata: dict | None = None) -> None:
        self._refuse()
        _convert_as_dora_does(metadata)
        if metadata and "tc.header" in metadata and type(data) in UNITS and len(data):
            # A tc message's value, which dora copies as it sends: recorded as its bytes then (as
            # send_output_raw's are), not as a view of memory the sender may change afterwards.
            width = UNITS[type(data)]
            data = np.frombuffer(data.buffers()[1], np.uint8, len(data) * width, data.offset * width).tobytes()
        self._record(output_id, data, metadata)

    def send_output_raw(self, output_id: str, data_length: int, metadata: dict | None = None) -> FakeSample:
        self._refuse()
        _convert_as_dora_does(metadata)
        return FakeSample(self, output_id, data_length, metadata)

    def dataflow_descriptor(self) -> Any:
        """The descriptor given (None stays None: a node of a dora without one)."""
        return self.descriptor

    # ---------------------------------------------------------------------------- events
    def next(self, timeout: float | None = None) -> dict | None:
        self.calls.append(("next", timeout))
        return self.events.popleft() if self.events else None

    def try_recv(self) -> dict | None:
        self.calls.append(("try_recv", None))
        return self.events.popleft() if self.events and self.events[0] is not None else None

    def __next__(self) -> dict:
        event = self.events.popleft() if self.events else None
        if event is None:
            raise StopIteration
        return event

    def drain(self) -> list:
        remaining = list(self.events)
        self.events.clear()
        return remaining

    def is_empty(self) -> bool:
        return not self.events


def _convert_as_dora_does(metadata: dict | None) -> None:
    """dora 1.1 turns metadata text into UTF-8 before it sends anything, and raises
    UnicodeEncodeError for text UTF-8 cannot carry (a lone surrogate), in a value or in a list."""
    for value in (metadata or {}).values():
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, str):
                item.encode("utf-8")


def _event(item: dict | tuple | None) -> dict | None:
    if item is None or isinstance(item, dict):
        return item
    input_id, value = item
    return {"type": "INPUT", "id": input_id, "value": value, "metadata": {}}
