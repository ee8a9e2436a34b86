"""Draws the benchmarks' results (out/bench/<name>.json, written by each bench script through
bench/_results.py) as PNGs in out/bench/img/ (`make plots`). matplotlib with the Agg backend: no
display needed.

    python bench/plots.py [--results DIR] [--out DIR]

Every figure names the machine, the date of its run and what its ratios are against (the
results' envelope). A benchmark without results (not run, or a GPU one on a machine without
CUDA) is listed as skipped; a results file that is not what its benchmark writes is one line
naming the file and the field, and the others are still drawn. Exit status: 0, 1 when a file
could not be drawn, 2 without matplotlib.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "out" / "bench"
DPI = 100  # small committed copies (docs/img/): ~800 px wide
COLORS = {  # one colour per contender, the same on every figure
    "tc": "tab:blue",
    "raw": "tab:gray",
    "contiguous+raw": "tab:gray",
    "pa.array": "tab:orange",
    "cuda-ipc": "tab:blue",
    "cpu+host+cuda": "tab:orange",
    "host-to-gpu": "tab:green",
    "PIL": "tab:gray",
    "torchcodec": "tab:blue",
    "torchvision": "tab:orange",
    "nvimgcodec": "tab:green",
    "CUDA IPC": "tab:purple",
    # dora_latency's check of tc's choice of primitive (thin, dashed: `plot_dora_latency`)
    "send_output": "tab:brown",
    "send_output:uint8": "tab:pink",
    "tc:send_output": "tab:cyan",
    "tc:send_output_raw": "tab:olive",
}


# -- reading results ------------------------------------------------------------------------------


class Malformed(Exception):
    """A results file that is not what its benchmark writes: the field, what was expected, what
    was found."""

    def __init__(self, field: str, expected: str, found: str, message: str | None = None):
        super().__init__(message or f"field '{field}': expected {expected}, found {found}")
        self.field, self.expected, self.found = field, expected, found


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


KINDS = {  # the kinds a field is checked against: what the error calls it, and the check
    "number": ("a number", _is_number),
    "number or null": ("a number or null", lambda v: v is None or _is_number(v)),
    "text": ("text", lambda v: isinstance(v, str)),
    "text or null": ("text or null", lambda v: v is None or isinstance(v, str)),
    "true or false": ("true or false", lambda v: isinstance(v, bool)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "object": ("an object", lambda v: isinstance(v, dict)),
}


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def field(data, path: str, kind: str):
    """data's field at `path` ("machine.cpus"), checked to be of `kind` (a key of KINDS)."""
    expected, check = KINDS[kind]
    value = data
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise Malformed(path, expected, "nothing (missing)")
        value = value[part]
    if not check(value):
        raise Malformed(path, expected, _shown(value))
    return value


def rows(data, path: str, **kinds: str) -> list[dict]:
    """The list at `path`, each item an object whose fields are of the given kinds."""
    items = field(data, path, "list")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise Malformed(f"{path}[{i}]", "an object", _shown(item))
        for key, kind in kinds.items():
            try:
                field(item, key, kind)
            except Malformed as e:
                raise Malformed(f"{path}[{i}].{e.field}", e.expected, e.found) from None
    return items


def load(path: Path) -> dict:
    """The results in `path`, their envelope checked (bench/_results.py)."""
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise Malformed("", "JSON", str(e), f"not JSON: {e}") from None
    if not isinstance(data, dict):
        raise Malformed("", "an object", _shown(data), f"expected a JSON object, found {_shown(data)}")
    for name, kind in (
        ("benchmark", "text"),
        ("date", "text"),
        ("baseline", "text"),
        ("machine", "object"),
        ("machine.system", "text"),
        ("machine.cpus", "number"),
        ("machine.gpu", "text or null"),
        ("machine.python", "text"),
        ("machine.torch", "text"),
    ):
        field(data, name, kind)
    _date(data)
    return data


def _date(data) -> str:
    try:
        when = datetime.datetime.fromisoformat(data["date"])
    except ValueError:
        raise Malformed("date", "an ISO 8601 date and time", _shown(data["date"])) from None
    if when.tzinfo is not None:
        when = when.astimezone(datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M UTC" if when.tzinfo else "%Y-%m-%d %H:%M")


def machine_text(data) -> str:
    m = data["machine"]
    cpu = f"{m['cpus']} CPUs" + (f" ({m['cpu_model']})" if isinstance(m.get("cpu_model"), str) else "")
    speed = m.get("python_speed_us")  # results written before it was measured have none
    pace = f"; sum(range(1000)) in {speed:.1f} us" if isinstance(speed, int | float) else ""
    return f"{m['system']}, {cpu}, {m['gpu'] or 'no GPU'}; python {m['python']}, torch {m['torch']}{pace}"


# -- drawing helpers ------------------------------------------------------------------------------


def stamp(fig, data: dict, title: str) -> None:
    """The figure's title, and under it the machine, the date of the run and the baseline."""
    fig.suptitle(title, fontsize=11)
    lines = [f"machine: {machine_text(data)}", f"run: {_date(data)}", f"ratios against: {data['baseline']}"]
    text = "\n".join(textwrap.fill(line, 140, subsequent_indent="    ") for line in lines)
    fig.text(
        0.01, 0.0, text, fontsize=7, color="0.3", ha="left", va="top"
    )  # below the axes: bbox_inches="tight" keeps it


def figure(plt, ncols: int = 1, width: float = 8.0, height: float = 4.2, **kw):
    return plt.subplots(1, ncols, figsize=(width, height), layout="constrained", squeeze=False, **kw)


def color(name: str) -> str:
    return COLORS.get(name, "tab:red")


def barh(ax, labels: list[str], values: list[float], notes: list[str], colors: list[str]) -> None:
    """Horizontal bars, top to bottom in the given order, each with its note at its end."""
    bars = ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.bar_label(bars, notes, padding=3, fontsize=7)
    ax.margins(x=0.25)


def goal_line(ax, value: float, text: str, vertical: bool = False) -> None:
    (ax.axvline if vertical else ax.axhline)(value, color="tab:red", linestyle="--", linewidth=1, label=text)


# -- one function per benchmark: data -> {png name: figure, or why it is not drawn} -------------


def plot_small_message(plt, data):
    items = rows(data, "rows", label="text", us="number", ratio="number")
    goal_us = field(data, "goal_us", "number")
    cold_goal_us = (
        field(data, "goal_cold_us", "number") if "goal_cold_us" in data else None
    )  # issue 18: one goal per case
    fig, ax = figure(plt, height=3.2)
    ax = ax[0][0]
    barh(
        ax,
        [r["label"] for r in items],
        [r["us"] for r in items],
        [f"{r['us']:.1f} us ({r['ratio']:.2f}x)" for r in items],
        ["tab:gray" if r["case"] == "baseline" else "tab:blue" for r in items],
    )
    if cold_goal_us is None:
        goal_line(ax, goal_us, f"goal: < {goal_us:g} us", vertical=True)
    else:
        goal_line(ax, goal_us, f"goal, header seen before: < {goal_us:g} us", vertical=True)
        ax.axvline(
            cold_goal_us,
            color="tab:red",
            linestyle=":",
            linewidth=1,
            label=f"goal, header never seen: < {cold_goal_us:g} us",
        )
    ax.set_xlabel("encode + decode, microseconds per message (median of batches)")
    ax.legend(fontsize=8, loc="lower right")
    stamp(fig, data, "Encode + decode of a 1 KB BoundingBoxes in one process")
    return {"small_message.png": fig}


def plot_decode_scaling(plt, data):
    items = rows(data, "rows", case="text", us="number", ratio="number")
    goal_ratio = field(data, "goal_ratio", "number")
    fig, ax = figure(plt, height=3.2)
    ax = ax[0][0]
    barh(
        ax,
        [r["case"] for r in items],
        [r["us"] for r in items],
        [f"{r['us']:,.1f} us ({r['ratio']:.2f}x)" for r in items],
        ["tab:orange" if r.get("copy") else "tab:blue" for r in items],
    )
    ax.set_xscale("log")
    ax.set_xlabel("decode + release, microseconds (log scale)")
    ax.set_title(f"goal: 64 MB zero-copy decode within {goal_ratio:g}x of the 1 KB decode", fontsize=9)
    stamp(fig, data, "Decode scaling: receiving is O(1) in tensor size")
    return {"decode_scaling.png": fig}


def plot_header_cost(plt, data):
    items = rows(
        data, "rows", case="text", outcome="text", seconds="number", json_loads_seconds="number", peak_bytes="number"
    )
    goal_ms, goal_mib = field(data, "goal_ms", "number"), field(data, "goal_mib", "number")
    fig, axes = figure(
        plt, ncols=2, width=10, height=1.2 + 0.32 * len(items), sharey=True, gridspec_kw={"width_ratios": [3, 1]}
    )
    left, right = axes[0]
    labels = [_short(r["case"], 48) + (" [refused]" if r["outcome"] == "refused" else "") for r in items]
    y = range(len(items))
    left.barh(
        [i - 0.2 for i in y],
        [r["seconds"] * 1e3 for r in items],
        height=0.4,
        color="tab:blue",
        label="tc.decode (fastest)",
    )
    left.barh(
        [i + 0.2 for i in y],
        [r["json_loads_seconds"] * 1e3 for r in items],
        height=0.4,
        color="tab:gray",
        label="json.loads (baseline)",
    )
    left.set_yticks(list(y), labels, fontsize=7)
    left.invert_yaxis()
    left.set_xscale("log")
    goal_line(left, goal_ms, f"goal: <= {goal_ms:g} ms", vertical=True)
    left.set_xlabel("milliseconds per header (log scale)")
    left.legend(fontsize=7, loc="lower right")
    right.barh(list(y), [r["peak_bytes"] / 2**20 for r in items], color="tab:purple")
    goal_line(right, goal_mib, f"goal: <= {goal_mib:g} MiB", vertical=True)
    right.set_xlabel("peak Python memory, MiB")
    right.legend(fontsize=7, loc="lower right")
    stamp(fig, data, "The worst headers within the limits, and just past them: time and memory to handle each")
    return {"header_cost.png": fig}


def plot_padding_check(plt, data):
    items = rows(
        data, "rows", leaves="number", leaf_bytes="number", with_check_s="number", without_s="number", ratio="number"
    )
    goal_ratio = field(data, "goal_ratio", "number")
    fig, ax = figure(plt, height=3.2)
    ax = ax[0][0]
    barh(
        ax,
        [
            f"{r['leaves']:,} leaves of {r['leaf_bytes']:,} B\n{r['with_check_s'] * 1e6:,.1f} vs "
            f"{r['without_s'] * 1e6:,.1f} us"
            for r in items
        ],
        [r["ratio"] for r in items],
        [f"{r['ratio']:.2f}x" for r in items],
        ["tab:blue"] * len(items),
    )
    goal_line(ax, goal_ratio, f"goal: <= {goal_ratio:g}x", vertical=True)
    ax.axvline(1.0, color="0.5", linewidth=0.8)
    ax.set_xlim(min(0.8, min(r["ratio"] for r in items) - 0.05), max(goal_ratio, *(r["ratio"] for r in items)) + 0.1)
    ax.set_xlabel("decode with the padding check / without it (the fastest of interleaved rounds)")
    ax.legend(fontsize=8, loc="lower right")
    stamp(fig, data, "What refusing non-zero padding costs a decode")
    return {"padding_check.png": fig}


def plot_dora_latency(plt, data):
    items = rows(
        data,
        "rows",
        layout="text",
        contender="text",
        size_mb="number",
        p50_ms="number",
        p10_ms="number",
        p90_ms="number",
        baseline="true or false",
    )
    layouts = list(dict.fromkeys(r["layout"] for r in items))
    fig, axes = figure(plt, ncols=max(1, len(layouts)), width=11, height=4.2, sharey=True)
    for ax, layout in zip(axes[0], layouts):
        mine = [r for r in items if r["layout"] == layout]
        base = {r["size_mb"]: r["p50_ms"] for r in mine if r["baseline"]}
        compared = {r["contender"] for r in mine if r["baseline"]} | {"tc", "pa.array"}
        for contender in dict.fromkeys(r["contender"] for r in mine):
            line = sorted((r for r in mine if r["contender"] == contender), key=lambda r: r["size_mb"])
            x = [r["size_mb"] for r in line]
            # dora's primitives, and tc with one forced (the "dora's primitives" table): thin and
            # without a band, so that the three lines compared stay readable among them.
            style = {"marker": "o"} if contender in compared else {"linestyle": "--", "linewidth": 1}
            ax.plot(x, [r["p50_ms"] for r in line], color=color(contender), label=contender, **style)
            if contender in compared:
                ax.fill_between(
                    x, [r["p10_ms"] for r in line], [r["p90_ms"] for r in line], color=color(contender), alpha=0.15
                )
            if contender == "tc":
                for r in line:
                    if r["size_mb"] in base:
                        ax.annotate(
                            f"{r['p50_ms'] / base[r['size_mb']]:.2f}x",
                            (r["size_mb"], r["p50_ms"]),
                            textcoords="offset points",
                            xytext=(4, -10),
                            fontsize=7,
                            color=color("tc"),
                        )
        _loglog(ax, "message size", layout.replace("_", " "), [r["size_mb"] for r in mine])
        ax.legend(fontsize=7, loc="upper left")
    axes[0][0].set_ylabel("latency, ms (p50; band p10 to p90)")
    stamp(fig, data, "End-to-end latency through dora against message size (tc's ratio to the baseline in blue)")
    return {"dora_latency.png": fig}


def _loglog(ax, xlabel: str, title: str, sizes: list[float]) -> None:
    """Log-log axes with plain numbers on them (1, 4, 16, 64 rather than 2^0 ... 2^6)."""
    from matplotlib.ticker import LogFormatter

    _size_axis(ax, sizes, xlabel)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", linewidth=0.3)


def _size_axis(ax, sizes_mb: list[float], xlabel: str) -> None:
    """A log x axis of message sizes, ticked at the sizes measured (4 KB, 1 MB, 64 MB)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log", base=2)
    ticks = []
    for size in sorted(set(sizes_mb)):
        if ticks and size < 1.5 * ticks[-1]:  # 56 and 64 MB side by side would print over each other: 64 only
            ticks[-1] = size
        else:
            ticks.append(size)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda mb, _: f"{mb * 1024:g} KB" if mb < 1 else f"{mb:g} MB"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)


def plot_camera_fps(plt, data):
    items = rows(
        data,
        "summary",
        contender="text",
        fps="number",
        p50="number",
        p99="number",
        received="number",
        fps_ratio="number",
        p50_ratio="number",
        p99_ratio="number",
        goal_met="true or false",
    )
    target, tolerance = field(data, "target_fps", "number"), field(data, "fps_tolerance", "number")
    p99_goal, frames = field(data, "p99_goal_ms", "number"), field(data, "frames", "number")
    fig, (axes) = figure(plt, ncols=2, width=10, height=3.6)
    left, right = axes[0]
    names = [r["contender"] for r in items]
    bars = left.bar(names, [r["fps"] for r in items], color=[color(n) for n in names])
    left.bar_label(
        bars,
        [
            f"{r['fps']:.2f} fps\n({r['fps_ratio']:.2f}x)\n\n{r['received']:g}/{frames:g} frames\ngoal "
            f"{'met' if r['goal_met'] else 'NOT met'}"
            for r in items
        ],
        fontsize=7,
        label_type="center",
        color="white",
    )
    others = [r["cpu_other"] for r in rows(data, "runs", cpu_other="number or null") if r["cpu_other"] is not None]
    if others:  # a run disturbed by other work on the machine shows as such
        left.set_title(
            f"CPU used by other work during the runs: {min(others):.2f} to {max(others):.2f} cores", fontsize=8
        )
    goal_line(left, tolerance * target, f"goal: >= {tolerance * target:g} fps")
    left.set_ylim(0, target * 1.3)
    left.set_ylabel("fps at the receiver (median)")
    left.legend(fontsize=7, loc="lower right")
    x = range(len(items))
    for offset, key, shade in ((-0.2, "p50", 0.55), (0.2, "p99", 1.0)):
        bars = right.bar(
            [i + offset for i in x],
            [r[key] for r in items],
            width=0.4,
            color=[color(n) for n in names],
            alpha=shade,
            label=key,
        )
        right.bar_label(bars, [f"{r[key]:.1f}\n({r[key + '_ratio']:.2f}x)" for r in items], fontsize=7)
    right.set_xticks(list(x), names)
    goal_line(right, p99_goal, f"goal: p99 < {p99_goal:g} ms")
    right.set_yscale("log")
    right.margins(y=0.3)
    right.set_ylabel("latency, ms (log; light p50, dark p99)")
    right.legend(fontsize=7, loc="upper right")
    size = f"{field(data, 'width', 'number'):g}x{field(data, 'height', 'number'):g}"
    stamp(fig, data, f"Camera {size} at {target:g} fps into the receiver: frame rate and latency")
    return {"camera_fps.png": fig}


def _jpeg_label(r: dict, setting: bool) -> str:
    if r["kind"] == "baseline":
        return "PIL, 1 thread (baseline)"
    if r["kind"] == "feed":
        return "CUDA IPC messages alone"
    kind = "engine alone" if r["kind"] == "engine" else "node path"
    return f"{r['engine']}, {kind}" + (f" (batch {r['batch']:g} x {r['workers']:g} workers)" if setting else "")


def _jpeg_panels(plt, data, items: list[dict], device: str, title: str):
    sizes = list(dict.fromkeys(r["size"] for r in items))
    fig, axes = figure(
        plt,
        ncols=len(sizes),
        width=5 * len(sizes) + 1,
        height=1.3 + 0.33 * max(sum(1 for r in items if r["size"] == s) for s in sizes),
    )
    for ax, size in zip(axes[0], sizes):
        mine = [r for r in items if r["size"] == size]
        barh(
            ax,
            [_jpeg_label(r, device == "cuda") for r in mine],
            [r["fps"] for r in mine],
            [f"{r['fps']:.1f} ({r['ratio']:.2f}x)" for r in mine],
            [color(r["engine"]) if r["kind"] != "engine" else _lighter(color(r["engine"])) for r in mine],
        )
        ax.set_title(size, fontsize=9)
        ax.set_xlabel("frames per second (median of rounds)")
    stamp(fig, data, title)
    return fig


def _lighter(name: str):
    import matplotlib.colors as mcolors

    r, g, b = mcolors.to_rgb(name)
    return (r + (1 - r) * 0.45, g + (1 - g) * 0.45, b + (1 - b) * 0.45)


def plot_jpeg_fps(plt, data):
    items = rows(
        data,
        "rows",
        size="text",
        engine="text",
        device="text",
        kind="text",
        batch="number",
        workers="number",
        fps="number or null",
        ratio="number or null",
    )
    measured = [r for r in items if r["fps"] is not None and r["ratio"] is not None]
    cpu = [r for r in measured if r["device"] == "cpu"]
    settings = sorted({(r["batch"], r["workers"]) for r in cpu if r["kind"] != "baseline"})
    where = "; ".join(f"batch {b:g}, {w:g} workers" for b, w in settings)
    out = {
        "jpeg_fps.png": _jpeg_panels(
            plt, data, cpu, "cpu", f"JPEG encoding on the CPU, quality 90 ({where}): light engine alone, dark node path"
        )
    }
    gpu = [r for r in measured if r["device"] == "cuda"]
    if gpu:
        sizes = {r["size"] for r in gpu}
        context = [r for r in cpu if r["size"] in sizes and r["kind"] == "baseline"]
        out["jpeg_fps_cuda.png"] = _jpeg_panels(
            plt,
            data,
            context + gpu,
            "cuda",
            f"JPEG encoding on {data['machine']['gpu'] or 'the GPU'}, quality 90: each engine at its best setting",
        )
    else:
        out["jpeg_fps_cuda.png"] = "no CUDA rows in this run"
    return out


def plot_cuda_ipc(plt, data):
    items = rows(data, "rows", contender="text", size_kb="number", p50_ms="number")
    fig, ax = figure(plt, height=4.0)
    ax = ax[0][0]
    for contender in dict.fromkeys(r["contender"] for r in items):
        line = sorted((r for r in items if r["contender"] == contender), key=lambda r: r["size_kb"])
        ax.plot(
            [r["size_kb"] / 1024 for r in line],
            [r["p50_ms"] for r in line],
            marker="o",
            color=color(contender),
            label=contender,
        )
    base = {r["size_kb"]: r["p50_ms"] for r in items if r["contender"] == "cpu+host+cuda"}
    for r in items:
        if r["contender"] == "cuda-ipc" and r["size_kb"] in base and r["p50_ms"] > 0:
            ax.annotate(
                f"{base[r['size_kb']] / r['p50_ms']:.1f}x faster",
                (r["size_kb"] / 1024, r["p50_ms"]),
                textcoords="offset points",
                xytext=(0, 7),
                ha="center",
                fontsize=7,
                color=color("cuda-ipc"),
            )
    _loglog(
        ax,
        "message size",
        "p50 latency until the tensor is usable on the receiver's GPU",
        [r["size_kb"] / 1024 for r in items],
    )
    ax.set_ylabel("latency, ms")
    ax.legend(fontsize=8)
    stamp(fig, data, "CUDA IPC through dora against host bytes (onto the GPU, and .cpu() -> dora -> .cuda())")
    return {"cuda_ipc.png": fig}


def plot_cross_daemon(plt, data):
    clusters = rows(data, "clusters", cluster="text", rows="list")
    for i, c in enumerate(clusters):
        try:
            rows(
                c,
                "rows",
                size_mb="number",
                same_p50_ms="number or null",
                cross_p50_ms="number or null",
                same_mb_s="number or null",
                cross_mb_s="number or null",
            )
        except Malformed as e:
            raise Malformed(f"clusters[{i}].{e.field}", e.expected, e.found) from None
    fig, axes = figure(plt, ncols=2, width=11, height=4.2)
    left, right = axes[0]
    notes = []
    for c, shade in zip(clusters, ("tab:orange", "tab:blue", "tab:green")):
        for key, style, who in (("same", "-", "same daemon"), ("cross", "--", "cross daemon")):
            for ax, unit in ((left, "p50_ms"), (right, "mb_s")):
                pts = [(r["size_mb"], r[f"{key}_{unit}"]) for r in c["rows"] if r[f"{key}_{unit}"] is not None]
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    style,
                    marker="o",
                    color=shade,
                    label=f"{c['cluster']}: {who}",
                )
        # no cross-daemon figure at a size: dora refused the message (an error), or lost it
        for why, sizes in (
            ("refused", [r["size_mb"] for r in c["rows"] if r["cross_mb_s"] is None and r.get("error")]),
            ("lost", [r["size_mb"] for r in c["rows"] if r["cross_mb_s"] is None and not r.get("error")]),
        ):
            if sizes:
                notes.append((f"{c['cluster']}, cross daemon: {why} at {', '.join(f'{x:g}' for x in sizes)} MB", shade))
    sizes = [r["size_mb"] for c in clusters for r in c["rows"]]
    _loglog(left, "message size", "latency, p50 of one message at a time", sizes)
    left.set_ylabel("ms")
    _loglog(right, "message size", f"throughput (goal: same/cross <= {field(data, 'goal_ratio', 'number'):g}x)", sizes)
    right.set_ylabel("MB/s")
    left.legend(fontsize=7, loc="upper left")
    right.legend(fontsize=7, loc="center right")
    for k, (note, shade) in enumerate(notes):
        right.text(0.98, 0.03 + 0.06 * k, note, fontsize=7, color=shade, ha="right", transform=right.transAxes)
    stamp(
        fig,
        data,
        f"Across daemons: tensors on {field(data, 'device', 'text')}, two daemons (machines A, B) against one",
    )
    return {"cross_daemon.png": fig}


def plot_host_staging(plt, data):
    items = rows(data, "rows", kb="number", d2h_ratio="number", h2d_ratio="number")
    fig, ax = figure(plt, height=3.8)
    ax = ax[0][0]
    for key, name, shade in (("d2h_ratio", "GPU -> host", "tab:blue"), ("h2d_ratio", "host -> GPU", "tab:orange")):
        ax.plot([r["kb"] / 1024 for r in items], [r[key] for r in items], marker="o", color=shade, label=name)
    ax.axhline(1.0, color="0.5", linewidth=0.8)
    _size_axis(ax, [r["kb"] / 1024 for r in items], "copy size")
    ax.set_ylabel("plain / registered time (> 1: registering pays per copy)")
    ax.legend(fontsize=8)
    stamp(fig, data, "GPU <-> a shared-memory region: plain copy vs the region registered with the driver once")
    return {"host_staging.png": fig}


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


PLOTS = {  # the benchmark (its results file's name) -> what draws it
    "small_message": plot_small_message,
    "decode_scaling": plot_decode_scaling,
    "header_cost": plot_header_cost,
    "padding_check": plot_padding_check,
    "dora_latency": plot_dora_latency,
    "camera_fps": plot_camera_fps,
    "jpeg_fps": plot_jpeg_fps,
    "cross_daemon": plot_cross_daemon,
    "cuda_ipc": plot_cuda_ipc,
    "host_staging": plot_host_staging,
}


# -- the command ----------------------------------------------------------------------------------


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def draw(plt, name: str, path: Path, out: Path) -> tuple[list[str], list[str]]:
    """Draws one benchmark's results: -> (PNGs written, what was skipped and why). Raises
    Malformed for a file that is not what its benchmark writes."""
    data = load(path)
    if "skipped" in data:
        return [], [f"{name} ({field(data, 'skipped', 'text')})"]
    written, skipped = [], []
    figures = PLOTS[name](plt, data)
    for png, fig in figures.items():
        if isinstance(fig, str):
            skipped.append(f"{png} ({fig})")
            continue
        fig.savefig(out / png, dpi=DPI, bbox_inches="tight")
        plt.close(fig)
        written.append(png)
    return written, skipped


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="where the results are (default out/bench)")
    parser.add_argument("--out", type=Path, default=None, help="where the PNGs go (default: img/ beside the results)")
    args = parser.parse_args(argv)
    try:
        import matplotlib
    except ImportError:
        print(
            "plots: matplotlib is not installed: pip install matplotlib (or pip install -e '.[plots]')", file=sys.stderr
        )
        return 2
    matplotlib.use("Agg")  # files only, no display (before pyplot is imported)
    import matplotlib.pyplot as plt

    out = args.out or args.results / "img"
    out.mkdir(parents=True, exist_ok=True)
    written, skipped, failed = [], [], []
    for name in PLOTS:
        path = args.results / f"{name}.json"
        if not path.exists():
            skipped.append(f"{name} (no {_rel(path)})")
            continue
        try:
            pngs, why = draw(plt, name, path, out)
        except Malformed as e:
            failed.append(f"{_rel(path)}: {e}")
        except Exception as e:  # a bug here must not cost the other figures
            failed.append(f"{_rel(path)}: could not draw it: {type(e).__name__}: {e}")
        else:
            written += pngs
            skipped += why
        plt.close("all")
    print(f"plots: {len(written)} written to {_rel(out)}: {', '.join(written) or 'none'}")
    for line in skipped:
        print(f"plots: skipped {line}")
    for line in failed:
        print(f"plots: error: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
