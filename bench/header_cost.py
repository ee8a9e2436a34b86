"""The worst headers within the limits: what each costs a receiver to handle (issue 14).

A header is hostile input: its cost must not depend on what it claims. Each case below is built
to sit at a limit (tensor_codec/limits.py: 1 MiB, 32,768 items, 256 KiB of strings, 4,096
tensors, namedtuple types worth 2,048 fields, logical bytes), of the kind of content that costs
the most per item, plus headers just past a limit, which must be refused cheaply. For each:
tc.decode's time (the fastest of --repeat calls, the header cache emptied before each: on a
shared machine the minimum is the best estimate of what the work itself costs; the median is
printed beside it) and the peak of Python memory it allocates (tracemalloc, a separate run). The
baseline, measured in the same run, is json.loads of the same text: the floor for any Python
receiver. Goals: every case handled in at most 50 ms and 32 MB.

    python bench/header_cost.py [--json PATH] [--repeat N]   (default out/bench/header_cost.json)
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
import torch  # noqa: E402
from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save  # noqa: E402
from torch.nn.utils.rnn import pack_sequence  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import tensor_codec as tc  # noqa: E402
from tensor_codec import limits, received  # noqa: E402  (modules)
from tensor_codec.wire import header_json  # noqa: E402
from tensor_codec.wire.structure import MAX_DEPTH  # noqa: E402
from tensor_codec.wire.tree import forget_generated_classes  # noqa: E402

GOAL_SECONDS = 0.050
GOAL_BYTES = 32 << 20
BASELINE = "json.loads of the same header text"


def _largest(make, fits) -> int:
    """The largest n for which fits(make(n)) holds (make grows with n)."""
    lo, hi = 1, 2
    while fits(make(hi)):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(make(mid)) else (lo, mid)
    return lo


def _encodes(obj) -> bool:
    try:
        tc.encode(obj)
        return True
    except tc.EncodeError:
        return False


def at_limit(name: str, make):
    """A case: the largest object of this shape whose message the limits accept."""
    n = _largest(make, _encodes)
    value, metadata = tc.encode(make(n))
    return name.format(n=n), value, metadata


def _host_message(header: str, nbytes: int = 0):
    """A host message whose header is `header` (an object, written without the members every
    header starts with: they are put first here)."""
    assert header.startswith("{")
    envelope = f'{{"version":{tc.WIRE_VERSION},"transport":"host",'
    value = pa.array(bytes(nbytes), type=pa.uint8()) if nbytes else pa.array([], type=pa.uint8())
    return value, {"tc.header": envelope + header[1:]}


def refused_cases(bounds: limits.Limits):
    cap = bounds.header_bytes
    items = "[" + ",".join(["0"] * 8_000_000) + "]"  # the campaign's 8-million-item list (16 MiB)
    yield "8,000,000-item list (16 MiB)", *_host_message(f'{{"leaves":[],"tree":{items}}}')
    fill = "[" + ",".join(["0"] * (cap // 2 - 40)) + "]"
    yield "1 MiB of items (~520,000)", *_host_message(f'{{"leaves":[],"tree":{fill}}}')
    commas = '"' + "," * (bounds.string_bytes + 10) + '"'
    yield "string of commas past string_bytes", *_host_message(f'{{"leaves":[],"tree":{commas}}}')
    empties = "[" + ",".join(["{}"] * (bounds.header_items - 16)) + "]"
    yield (
        f"{bounds.header_items - 16:,} empty objects (parsed, then refused)",
        *_host_message(f'{{"leaves":[],"tree":{{"t":"list","items":{empties}}}}}'),
    )
    dup = ",".join(f'["k{i}",{i}]' for i in range(bounds.header_items // 6))
    yield (
        "duplicate member name after a full dict",
        *_host_message(f'{{"leaves":[],"tree":{{"t":"dict","items":[{dup}]}},"tree":null}}'),
    )
    huge = 1 << 60
    yield (
        "stride-0 tensor of 2**62 logical bytes",
        *_host_message(
            '{"leaves":[{"dtype":"float32","shape":['
            + str(huge)
            + '],"strides":[0],"nbytes":4,"offset":0}],"tree":{"t":"tensor","leaf":0}}',
            4,
        ),
    )
    nt = [collections.namedtuple(f"T{k}", [f"f{i}" for i in range(1024)]) for k in range(3)]
    v, m = _unlimited_encode([cls(*range(1024)) for cls in nt])
    yield "3 namedtuple types x 1024 fields (2 classes built, then refused)", v, m


def _unlimited_encode(obj):
    previous = limits.set_limits(namedtuple_fields=1 << 20, header_items=1 << 24, header_bytes=16 << 20)
    try:
        return tc.encode(obj)
    finally:
        limits.set_limits(previous)


def accepted_cases():
    yield at_limit("{n} one-element float32 tensors", lambda n: [torch.zeros(1) for _ in range(n)])
    yield at_limit("{n} empty rank-8 tensors", lambda n: [torch.zeros([1] * 7 + [0]) for _ in range(n)])
    yield at_limit(
        "{n} BoundingBoxes",
        lambda n: [
            tv_tensors.BoundingBoxes(torch.zeros(1, 4), format="XYXY", canvas_size=(480, 640)) for _ in range(n)
        ],
    )
    yield at_limit("list of {n} ints", lambda n: list(range(n)))
    yield at_limit("list of {n} NaNs", lambda n: [float("nan")] * n)
    yield at_limit("dict of {n} string keys", lambda n: {f"key-{i:06d}": i for i in range(n)})

    def nested(n):
        x = 0
        for _ in range(MAX_DEPTH - 1):
            x = [x]
        return [x] * n

    yield at_limit("{n} lists nested 63 deep", nested)
    yield at_limit("{n} tuples with a tensor, 63 deep", lambda n: [_deep_tuple(torch.zeros(1)) for _ in range(n)])
    big = collections.namedtuple("Big", [f"f{i}" for i in range(990)])
    other = collections.namedtuple("Other", [f"g{i}" for i in range(990)])
    yield at_limit(
        "2 namedtuple types x 990 fields, {n} instances",
        lambda n: [big(*range(990)), other(*range(990))] + [big(*range(990))] * n,
    )
    yield "63 namedtuple types x 0 fields", *tc.encode([collections.namedtuple(f"E{i}", [])() for i in range(63)])
    yield at_limit("one string of {n} characters", lambda n: "x" * n)
    yield at_limit("{n} PackedSequences", lambda n: [pack_sequence([torch.zeros(2), torch.zeros(1)])] * n)


def _deep_tuple(t):
    x = t
    for _ in range(MAX_DEPTH - 1):
        x = (x,)
    return x


def _handle(value, metadata):
    received.forget_all()  # a header never seen, and namedtuple classes never made
    forget_generated_classes()
    try:
        obj = tc.decode(value, metadata, copy=True)
        del obj
        return "accepted"
    except tc.DecodeError:
        return "refused"


def _seconds(fn, repeat: int) -> tuple[float, float]:
    """-> (fastest, median) wall-clock seconds of `repeat` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def _peak_bytes(value, metadata) -> int:
    tracemalloc.start()
    try:
        _handle(value, metadata)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_json_option(parser, "header_cost")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    bounds = limits.current()
    print(f"header cost at the limits {bounds}")
    print(
        f"{'case':58s} {'outcome':9s} {'bytes':>9s} {'items':>7s} {'decode':>10s} {'(median)':>10s} "
        f"{'json.loads':>10s} {'ratio':>6s} {'peak MB':>8s}"
    )
    rows = []
    cases = [(c, "accepted") for c in accepted_cases()] + [(c, "refused") for c in refused_cases(bounds)]
    for (name, value, metadata), expected in cases:
        text = metadata["tc.header"]
        outcome = _handle(value, metadata)
        seconds, median = _seconds(lambda: _handle(value, metadata), args.repeat)
        baseline, _ = _seconds(lambda: _json_or_none(text), args.repeat)
        peak = _peak_bytes(value, metadata)
        cost = header_json.measure(text) if len(text) < (4 << 20) else None
        rows.append(
            {
                "case": name,
                "expected": expected,
                "outcome": outcome,
                "bytes": len(text.encode()),
                "items": cost.items if cost else None,
                "seconds": seconds,
                "median_seconds": median,
                "json_loads_seconds": baseline,
                "peak_bytes": peak,
            }
        )
        print(
            f"{name[:58]:58s} {outcome:9s} {len(text.encode()):9d} {cost.items if cost else '-':>7} "
            f"{seconds * 1e3:7.2f} ms {median * 1e3:7.2f} ms {baseline * 1e3:7.2f} ms "
            f"{seconds / baseline if baseline else 0:6.2f} {peak / 1e6:8.2f}"
        )
    worst_time = max(rows, key=lambda r: r["seconds"])
    worst_memory = max(rows, key=lambda r: r["peak_bytes"])
    wrong = [r["case"] for r in rows if r["outcome"] != r["expected"]]
    goals = [
        goal(
            "worst header handled in at most 50 ms",
            worst_time["seconds"] * 1e3,
            "<=",
            GOAL_SECONDS * 1e3,
            "ms",
            f"{worst_time['case']}: {worst_time['seconds'] * 1e3:.1f} ms",
        ),
        goal(
            "worst header handled in at most 32 MB extra memory",
            worst_memory["peak_bytes"] / 2**20,
            "<=",
            GOAL_BYTES / 2**20,
            "MiB",
            f"{worst_memory['case']}: {worst_memory['peak_bytes'] / 2**20:.1f} MiB",
        ),
        goal(
            "each case accepted or refused as built", len(wrong), "<=", 0, "cases", ", ".join(wrong) or "all as built"
        ),
    ]
    print_goals(goals)
    figures = {
        "limits": dict(vars(bounds)),
        "goal_ms": GOAL_SECONDS * 1e3,
        "goal_mib": GOAL_BYTES / 2**20,
        "rows": rows,
        "goals": goals,
    }
    return save("header_cost", BASELINE, figures, args.json)


def _json_or_none(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


if __name__ == "__main__":
    main()
