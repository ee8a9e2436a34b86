"""Counting the device calls a CUDA IPC message costs, inside the real sender and receiver nodes of
bench/cuda_ipc.py (issue 36: the steady-state contract measured on a GPU, not only on the CPU
stand-in).

Each node opens named ranges around the codec's work on one message (``send``, ``receive``,
``release``) and a counter says which calls happened inside them:

* on a GPU, `CudaApiCounter`: CUDA's own API, runtime and driver, as CUPTI reports it through
  torch.profiler; a call is counted in a range when the trace puts it inside that range;
* on the tests' CPU stand-in backend, `BackendCounter`: the backend's own count of its operations
  (tests/support/ipc_fake_backend.py), the same contract the unit tests assert.

Both give ``{range: {"messages": n, "calls": {name: count}}}``; `forbidden` names the calls that
must never happen per message in steady state (allocations, IPC handles opened or exported,
events made, host synchronisation).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator

RANGE_PREFIX = "tc-count:"
API_CATEGORIES = ("cuda_runtime", "cuda_driver")
# Set-up and host-blocking calls by family: allocating or freeing memory, exporting or opening IPC
# handles, creating or destroying events and streams, page-locking, and every host wait (a
# synchronize, a blocking memcpy). cuMemGetAddressRange is the receiver's bounds check of a segment
# it opens: set-up too.
_FORBIDDEN_CUDA = re.compile(
    r"Malloc|Free|Ipc|Create|Destroy|Register|HostAlloc|Synchronize|MemGetAddressRange|^cu(da)?Memcpy(2D|3D)?(_v2)?$"
)
STAND_IN_SETUP = frozenset({"allocate", "export", "new_event", "open_segment", "open_event", "new_marker", "retire"})


def forbidden(name: str, *, stand_in: bool) -> bool:
    """Whether a call named `name` breaks the steady-state contract when it happens per message."""
    return name in STAND_IN_SETUP if stand_in else bool(_FORBIDDEN_CUDA.search(name))


def calls_in_ranges(trace_events: list) -> dict:
    """From a Chrome trace's events (torch.profiler's export): for each range named
    RANGE_PREFIX + name, how many times it was opened and the CUDA API calls that fell inside
    it. Calls outside every range are not counted (the benchmark's own timing and syncs)."""
    ranges, calls = [], []
    for e in trace_events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        name, cat = str(e.get("name", "")), e.get("cat")
        if cat == "user_annotation" and name.startswith(RANGE_PREFIX):
            ranges.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), name[len(RANGE_PREFIX) :]))
        elif cat in API_CATEGORIES:
            calls.append((float(e["ts"]), name))
    ranges.sort()
    found: dict[str, dict] = {}
    for _start, _end, name in ranges:
        entry = found.setdefault(name, {"messages": 0, "calls": Counter()})
        entry["messages"] += 1
    for ts, call in calls:
        # The innermost range that holds the call's start (ranges of one node do not overlap).
        holder = None
        for start, end, name in ranges:
            if start > ts:
                break
            if ts <= end:
                holder = name
        if holder is not None:
            found[holder]["calls"][call] += 1
    return {name: {"messages": e["messages"], "calls": dict(e["calls"])} for name, e in found.items()}


class CudaApiCounter:
    """CUDA API calls (CUPTI, through torch.profiler) inside named ranges of this process. With
    `keep_trace` (a path ending in .json.gz) the whole trace is kept there, with Python's calls
    (with_stack): a timeline of where each message's time went, for chrome://tracing or Perfetto."""

    def __init__(self, keep_trace: str | None = None):
        import torch

        self._torch = torch
        self._keep = keep_trace
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        self._profile = torch.profiler.profile(activities=activities, with_stack=bool(keep_trace))
        self._profile.__enter__()

    def range(self, name: str):
        return self._torch.profiler.record_function(RANGE_PREFIX + name)

    def finish(self) -> dict:
        self._profile.__exit__(None, None, None)
        fd, path = tempfile.mkstemp(suffix=".json", prefix="tc-device-calls-")
        os.close(fd)
        try:
            self._profile.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f).get("traceEvents", [])
            if self._keep:
                with open(path, "rb") as f, gzip.open(self._keep, "wb") as kept:
                    shutil.copyfileobj(f, kept)
        finally:
            os.unlink(path)
        return calls_in_ranges(events)


class BackendCounter:
    """The CPU stand-in backend's own operation counts inside named ranges."""

    def __init__(self, backend):
        self._ops: Counter = backend.ops
        self._found: dict[str, dict] = {}

    @contextlib.contextmanager
    def range(self, name: str) -> Iterator[None]:
        before = Counter(self._ops)
        try:
            yield
        finally:
            entry = self._found.setdefault(name, {"messages": 0, "calls": Counter()})
            entry["messages"] += 1
            entry["calls"].update(Counter(self._ops) - before)

    def finish(self) -> dict:
        return {name: {"messages": e["messages"], "calls": dict(e["calls"])} for name, e in self._found.items()}


def per_message(counted: dict) -> dict:
    """{range: {"messages": n, "calls": {...}}} -> {range: {name: calls per message}}."""
    return {
        name: {call: count / e["messages"] for call, count in sorted(e["calls"].items())}
        for name, e in counted.items()
        if e["messages"]
    }
