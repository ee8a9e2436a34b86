"""The monitor's logic, without dora: what each message is (`look`), counts per input over a
window and over the run (`InputStats`), the periodic lines and the end summary (`Monitor`).

Nothing here decodes a tensor or reads a data byte: a tensor_codec message is described from its
header (tensor_codec.describe), a dora image from its metadata and its value's length, any other
Arrow value from its type and length. A CUDA IPC message is passed over (its ledger slot claimed
and released at once, nothing mapped) so its producer does not wait for the monitor; a copy of one
it passed already (any node may forward one to it) is counted as a message and not claimed again
(tensor_codec remembers what this process passed), so it never stands in for another receiver.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

import tensor_codec as tc
from tensor_codec.describe import describe

from ..common import protocol as P
from ..common.hostile import Refusals
from ..common.images import CHANNELS
from ..common.stats import Latencies

__all__ = ["Seen", "look", "InputStats", "Monitor", "period_line", "echo_line", "fmt_bytes", "fmt_ms"]

STRUCTURE_CHARS = 300  # of a message's structure in a line
MAX_INPUTS = 256  # inputs followed by name (dora delivers only declared ones: a dataflow has a few)
MAX_KINDS = 8  # kinds of message remembered per input, the rest counted as "other"
WINDOW_SAMPLES = 4096  # latencies kept per window for its p50 (its max is exact)
# A latency outside this is a clock that is not the wall clock, not a latency: not counted.
LATENCY_RANGE_MS = (-60_000.0, 86_400_000.0)
_UINT8 = pa.uint8()


@dataclass(frozen=True)
class Seen:
    """One message, looked at: `kind` (the transport, as the lines show it: "tc host", "tc cuda-ipc",
    "dora image", "arrow"), `what` (its structure, encoding and size, or Arrow type and length),
    `nbytes` (what travelled: the Arrow value's bytes) and `gpu_bytes` (the GPU memory a CUDA IPC
    message refers to, which does not travel)."""

    kind: str
    what: str
    nbytes: int
    gpu_bytes: int = 0


def arrow_bytes(value: Any) -> int:
    """The bytes of an Arrow value's buffers, as far as its slice reaches (0 for anything else)."""
    return value.nbytes if isinstance(value, pa.Array) else 0


def look(
    value: Any, metadata: Any, *, width: int = 6, depth: int = 3, pass_ipc: Callable[[dict], None] | None = None
) -> Seen:
    """What one message is; tc.DecodeError naming the field when it is malformed (a codec message
    validated as decode validates it, a dora image's fields and length, a value that is no Arrow
    array). `pass_ipc(metadata)` takes part in a CUDA IPC message without reading it."""
    if not isinstance(metadata, dict):
        raise tc.DecodeError(f"metadata: expected a dict, got {type(metadata).__name__}")
    if tc.is_codec_message(metadata):
        d = describe(metadata, value, width=width, depth=depth, max_chars=STRUCTURE_CHARS)
        if d.transport == "cuda-ipc":
            if pass_ipc is not None:
                pass_ipc(metadata)
            return Seen("tc cuda-ipc", f"{d.structure} on {d.gpu}", 0, d.nbytes)
        return Seen("tc host", d.structure, d.nbytes)
    if not isinstance(value, pa.Array):
        raise tc.DecodeError(f"value: expected a pyarrow.Array, got {type(value).__name__}")
    if P.ENCODING in metadata:
        return Seen("dora image", _image(value, metadata), arrow_bytes(value))
    kind = str(value.type)
    kind = kind if len(kind) <= 60 else kind[:57] + "..."
    return Seen("arrow", f"{kind} x {len(value)}", arrow_bytes(value))


def _image(value: pa.Array, metadata: dict) -> str:
    """A dora image message (dora's convention: flat bytes with `encoding`, `width`, `height`)."""
    encoding = metadata[P.ENCODING]
    if type(encoding) is not str or not 0 < len(encoding) <= 32 or not encoding.isprintable():
        raise tc.DecodeError(f"metadata.encoding: expected an encoding name such as rgb8 or jpeg, got {encoding!r:.40}")
    sizes = {}
    for key in (P.WIDTH, P.HEIGHT):
        v = metadata.get(key)
        if v is None and encoding not in CHANNELS:
            continue  # a JPEG names its size inside
        if type(v) is not int or not 0 < v < 1 << 31:
            raise tc.DecodeError(f"metadata.{key}: expected a positive integer, got {v!r:.40}")
        sizes[key] = v
    if value.type != _UINT8 or value.null_count:
        raise tc.DecodeError(f"value: expected flat uint8 bytes without nulls, got {str(value.type)[:40]}")
    size = f" {sizes[P.WIDTH]}x{sizes[P.HEIGHT]}" if len(sizes) == 2 else ""
    channels = CHANNELS.get(encoding)
    if channels is not None:
        expected = sizes[P.WIDTH] * sizes[P.HEIGHT] * channels
        if len(value) != expected:
            raise tc.DecodeError(
                f"value: expected {sizes[P.WIDTH]}x{sizes[P.HEIGHT]}x{channels} = {expected} bytes for {encoding}, "
                f"got {len(value)}"
            )
        return f"{encoding}{size}"
    if encoding == "jpeg":
        if not len(value):
            raise tc.DecodeError("value: expected the JPEG's bytes, got none")
        return f"jpeg{size}, {fmt_bytes(len(value))}"
    return f"{encoding}{size} (an encoding the monitor does not check), {fmt_bytes(len(value))}"


def latency_ms(metadata: Any, now_ns: int) -> float | None:
    """Milliseconds since the message's `sent_ns` (the sender's wall clock), or None."""
    sent = metadata.get(P.SENT_NS) if isinstance(metadata, dict) else None
    if type(sent) is not int:
        return None
    ms = (now_ns - sent) / 1e6
    low, high = LATENCY_RANGE_MS
    return ms if low <= ms <= high else None


class InputStats:
    """One input: this window's counts (reset by `take_window`) and the run's."""

    def __init__(self, started: float):
        self.window_start = started
        self.window = self._empty_window()
        self.messages = self.bad = self.nbytes = self.gpu_bytes = 0
        self.latencies = Latencies()
        self.kinds: Counter[str] = Counter()
        self.first: float | None = None
        self.last_at: float | None = None
        self.last: Seen | None = None

    @staticmethod
    def _empty_window() -> dict:
        return {"messages": 0, "bad": 0, "nbytes": 0, "gpu_bytes": 0, "latencies": [], "max_ms": None}

    def add(self, now: float, seen: Seen | None, nbytes: int, ms: float | None) -> None:
        """One message at `now`: `seen` (None: a bad one), the bytes it carried, its latency."""
        w = self.window
        w["messages"] += 1
        self.messages += 1
        if self.first is None:
            self.first = now
        self.last_at = now
        if seen is None:
            w["bad"] += 1
            self.bad += 1
            w["nbytes"] += nbytes
            self.nbytes += nbytes
            return
        w["nbytes"] += seen.nbytes
        w["gpu_bytes"] += seen.gpu_bytes
        self.nbytes += seen.nbytes
        self.gpu_bytes += seen.gpu_bytes
        kind = seen.kind if seen.kind in self.kinds or len(self.kinds) < MAX_KINDS else "other"
        self.kinds[kind] += 1
        self.last = seen
        if ms is not None:
            self.latencies.add(ms)
            if len(w["latencies"]) < WINDOW_SAMPLES:
                w["latencies"].append(ms)
            w["max_ms"] = ms if w["max_ms"] is None else max(w["max_ms"], ms)

    def take_window(self, now: float) -> tuple[dict, float]:
        """-> (this window's counts, its seconds), and a new window from `now`."""
        window, seconds = self.window, max(now - self.window_start, 1e-9)
        self.window, self.window_start = self._empty_window(), now
        return window, seconds

    def mean_rate(self) -> float | None:
        """Messages per second from the first to the last (None below two messages)."""
        if self.messages < 2 or self.first is None or self.last_at is None or self.last_at <= self.first:
            return None
        return (self.messages - 1) / (self.last_at - self.first)


class Monitor:
    """Every input's counts; `report(now)` -> the lines of one period, `summary()` -> the end's."""

    def __init__(
        self,
        inputs: set[str] | list[str] = (),
        *,
        width: int = 6,
        depth: int = 3,
        refusals: Refusals | None = None,
        pass_ipc: Callable[[dict], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ns: Callable[[], int] = time.time_ns,
    ):
        import logging

        self.width, self.depth = width, depth
        self.refusals = refusals if refusals is not None else Refusals(logging.getLogger("monitor"))
        self.pass_ipc = pass_ipc
        self.clock, self.wall_ns = clock, wall_ns
        now = clock()
        self.inputs: dict[str, InputStats] = {name: InputStats(now) for name in sorted(inputs)[:MAX_INPUTS]}

    def stats(self, input_id: Any) -> InputStats:
        name = str(input_id)[:64]
        s = self.inputs.get(name)
        if s is None:
            if len(self.inputs) >= MAX_INPUTS:
                name = "other"
                s = self.inputs.get(name)
            if s is None:
                s = self.inputs[name] = InputStats(self.clock())
        return s

    def handle(self, input_id: Any, value: Any, metadata: Any) -> Seen | None:
        """One message: looked at, counted; a malformed one refused (logged, paced) and counted bad."""
        now, wall = self.clock(), self.wall_ns()
        s = self.stats(input_id)
        try:
            seen = look(value, metadata, width=self.width, depth=self.depth, pass_ipc=self.pass_ipc)
        except tc.CodecError as e:
            s.add(now, None, arrow_bytes(value), None)
            self.refusals.refuse(f"{str(input_id)[:64]}: bad message", str(e))
            return None
        s.add(now, seen, seen.nbytes, latency_ms(metadata, wall))
        return seen

    def report(self, now: float | None = None) -> list[str]:
        """One line per input that received something since the last report (its window closes)."""
        now = self.clock() if now is None else now
        lines = []
        for name, s in self.inputs.items():
            window, seconds = s.take_window(now)
            if window["messages"]:
                lines.append(period_line(name, window, seconds, s.last))
        return lines

    def summary(self) -> str:
        """The table printed at the end: every input, what it received over the run."""
        columns = ("input", "messages", "bad", "bytes", "GPU bytes", "msg/s", "p50 ms", "p99 ms", "kinds")
        rows = []
        for name, s in self.inputs.items():
            rate = s.mean_rate()
            kinds = ", ".join(kind for kind, _ in s.kinds.most_common()) or "-"
            rows.append(
                (
                    name,
                    s.messages,
                    s.bad,
                    fmt_bytes(s.nbytes),
                    fmt_bytes(s.gpu_bytes) if s.gpu_bytes else "-",
                    "-" if rate is None else f"{rate:.1f}",
                    fmt_ms(s.latencies.percentile(50), unit=False),
                    fmt_ms(s.latencies.percentile(99), unit=False),
                    kinds,
                )
            )
        widths = [max([len(c)] + [len(str(r[i])) for r in rows]) for i, c in enumerate(columns)]

        def line(cells) -> str:
            last = len(cells) - 1
            return "  ".join(
                str(c).ljust(w) if i in (0, last) else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
            ).rstrip()

        out = [f"monitor summary: {len(self.inputs)} inputs", line(columns)] + [line(r) for r in rows]
        for name, s in self.inputs.items():
            if s.last is not None:
                out.append(f"  {name}: last {s.last.kind}: {s.last.what}")
            elif not s.messages:
                out.append(f"  {name}: nothing received")
        if any(s.latencies.samples for s in self.inputs.values()):
            out.append("  (latency: from the sender's sent_ns to the monitor, wall clock)")
        return "\n".join(out)


def period_line(name: str, window: dict, seconds: float, last: Seen | None) -> str:
    """e.g. "monitor: frames | 30.0 msg/s | 27.6 MB/s | latency p50 1.2 ms, max 3.4 ms | tc host |
    Image uint8[3, 480, 640]"."""
    rate = f"{window['messages'] / seconds:.1f} msg/s"
    parts = []
    if window["nbytes"] or not window["gpu_bytes"]:
        parts.append(f"{fmt_bytes(window['nbytes'] / seconds)}/s")
    if window["gpu_bytes"]:
        parts.append(f"{fmt_bytes(window['gpu_bytes'] / seconds)}/s on GPU")
    samples = window["latencies"]
    if samples:
        ordered = sorted(samples)
        latency = f"latency p50 {fmt_ms(ordered[(len(ordered) - 1) // 2])}, max {fmt_ms(window['max_ms'])}"
    else:
        latency = "latency -"
    cells = [f"monitor: {name}", rate, " + ".join(parts), latency]
    if last is not None:
        cells += [last.kind, last.what]
    if window["bad"]:
        cells.append(f"{window['bad']} bad")
    return " | ".join(cells)


def echo_line(name: str, seen: Seen) -> str:
    """ECHO=1: one message, e.g. "monitor: frames: tc host: Image uint8[3, 480, 640]"."""
    return f"monitor: {name}: {seen.kind}: {seen.what}"


def fmt_bytes(n: float) -> str:
    """512 B, 27.6 kB, 1.5 MB, 2.0 GB (1000-based, as bandwidth is usually read)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_ms(ms: float | None, *, unit: bool = True) -> str:
    if ms is None:
        return "-"
    text = f"{ms:.1f}" if abs(ms) < 100 else f"{ms:.0f}"
    return f"{text} ms" if unit else text
