"""A receiver's cache of opened producer segments (or events), bounded (least recently used first
out), keyed by the producer and the handle bytes: why, docs/cuda-ipc-design.md, "The protocol",
receiving step 3. `open_segment` does the opening (CUDA, or a stand-in); nothing here touches CUDA.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable
from typing import Any

from .identity import pid_alive

__all__ = ["HandleCache"]


class HandleCache:
    def __init__(self, open_segment: Callable[[bytes, int], Any], *, max_entries: int = 64):
        self.open_segment = open_segment
        self.max_entries = max_entries
        self.entries: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
        self.lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, producer: Hashable, pid: int | None, handle: bytes, device_index: int, *open_args: Any) -> Any:
        """The opened segment for `handle` from `producer` (its process id when comparable), opened
        on a miss, outside the lock (it is slow), by `open_segment(handle, device_index, *open_args)`."""
        key = (producer, handle, device_index)
        with self.lock:
            found = self.entries.get(key)
            if found is not None:
                self.entries.move_to_end(key)
                self.hits += 1
                return found
        if pid is not None and not pid_alive(pid):
            self.forget(producer)
            raise ProcessLookupError(f"producer process {pid} has exited: its GPU memory is gone")
        opened = self.open_segment(handle, device_index, *open_args)
        with self.lock:
            self.misses += 1
            self.entries[key] = opened
            self.entries.move_to_end(key)
            while len(self.entries) > self.max_entries:
                self.entries.popitem(last=False)  # the mapping closes once no message uses it
        return opened

    def forget(self, producer: Hashable) -> int:
        """Drop every entry of `producer`; -> how many."""
        with self.lock:
            keys = [k for k in self.entries if k[0] == producer]
            for k in keys:
                del self.entries[k]
            return len(keys)

    def __len__(self) -> int:
        return len(self.entries)
