"""`make plots` (bench/plots.py): the benchmarks' JSON results drawn as PNGs. Sample results in
the shapes the bench scripts write are drawn here (no benchmark runs, no dora), a missing or
skipped benchmark is listed, a malformed file is named with its field while the others are still
drawn, and two real benchmarks, run with tiny repetitions, write results the plotter accepts."""

from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.optional import import_or_skip

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _plots():
    spec = importlib.util.spec_from_file_location("bench_plots", BENCH / "plots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plots = _plots()

MACHINE = {
    "platform": "Linux-6.1-x86_64",
    "system": "Linux x86_64",
    "cpus": 2,
    "cpu_model": "Test CPU",
    "gpu": None,
    "python": "3.11.7",
    "torch": "2.14.1",
}


def envelope(name: str, baseline: str, **figures) -> dict:
    return {"benchmark": name, "machine": MACHINE, "date": "2026-11-23T08:34:00+00:00", "baseline": baseline, **figures}


def latency_rows() -> list[dict]:
    out = []
    for layout, contenders in (
        ("contiguous", ["raw", "tc", "pa.array"]),
        ("transposed", ["contiguous+raw", "tc", "pa.array"]),
    ):
        for size in (1, 4, 16, 64):
            for k, c in enumerate(contenders):
                p50 = 0.5 + size * (0.15 + 0.03 * k)
                out.append(
                    {
                        "layout": layout,
                        "contender": c,
                        "size_mb": size,
                        "messages": 15,
                        "p50_ms": p50,
                        "p10_ms": p50 * 0.9,
                        "p90_ms": p50 * 1.2,
                        "baseline": k == 0,
                    }
                )
    return out


def jpeg_rows() -> list[dict]:
    out = []
    for size, pil in (("1080p", 118.0), ("4k", 29.0)):
        out.append(
            {
                "size": size,
                "label": "PIL (baseline), 1 thread",
                "engine": "PIL",
                "device": "cpu",
                "kind": "baseline",
                "batch": 1,
                "workers": 1,
                "fps": pil,
                "ratio": 1.0,
                "error": None,
            }
        )
        for engine, device, kind, fps in (
            ("torchcodec", "cpu", "engine", 2.5),
            ("torchvision", "cpu", "node", 2.3),
            ("nvimgcodec", "cuda", "node", 30.0),
            ("", "cuda", "feed", 60.0),
        ):
            out.append(
                {
                    "size": size,
                    "label": f"{engine} {device} {kind}",
                    "engine": engine or "CUDA IPC",
                    "device": device,
                    "kind": kind,
                    "batch": 4 if device == "cpu" else 32,
                    "workers": 2,
                    "fps": pil * fps,
                    "ratio": fps,
                    "error": None,
                }
            )
        out.append(
            {
                "size": size,
                "label": "torchvision cuda node",
                "engine": "torchvision",
                "device": "cuda",
                "kind": "node",
                "batch": 8,
                "workers": 1,
                "fps": None,
                "ratio": None,
                "error": "RuntimeError: failed",
            }
        )
    return out


def cross_rows(cross_factor: float, refuse_64: bool) -> list[dict]:
    out = []
    for size in (1, 4, 16, 64):
        refused = refuse_64 and size == 64
        same = 1000.0 * size**0.5
        out.append(
            {
                "size_mb": size,
                "same_p50_ms": 0.3 * size,
                "cross_p50_ms": None if refused else 0.3 * size * cross_factor,
                "latency_ratio": None if refused else cross_factor,
                "same_mb_s": same,
                "cross_mb_s": None if refused else same / cross_factor,
                "throughput_ratio": None if refused else cross_factor,
                "error": "over the 64 MiB of dora's daemon relay" if refused else None,
            }
        )
    return out


SAMPLES = {
    "small_message": envelope(
        "small_message",
        "pa.array + from_numpy",
        goal_us=50.0,
        rows=[
            {"case": "baseline", "label": "baseline", "us": 6.0, "ratio": 1.0},
            {"case": "warm", "label": "tc, warm", "us": 21.0, "ratio": 3.5},
            {"case": "cold", "label": "tc, cold", "us": 60.0, "ratio": 10.0},
        ],
    ),
    "decode_scaling": envelope(
        "decode_scaling",
        "the 1 KB decode",
        goal_ratio=2.0,
        rows=[
            {"case": "1KB decode", "bytes": 1024, "copy": False, "us": 8.6, "ratio": 1.0},
            {"case": "64MB decode", "bytes": 64 << 20, "copy": False, "us": 15.4, "ratio": 1.8},
            {"case": "64MB decode, copy=True", "bytes": 64 << 20, "copy": True, "us": 36000.0, "ratio": 4186.0},
        ],
    ),
    "header_cost": envelope(
        "header_cost",
        "json.loads",
        goal_ms=50.0,
        goal_mib=32.0,
        rows=[
            {
                "case": "1,819 tensors",
                "expected": "accepted",
                "outcome": "accepted",
                "seconds": 0.025,
                "json_loads_seconds": 0.0025,
                "peak_bytes": 4.6e6,
            },
            {
                "case": "8,000,000-item list",
                "expected": "refused",
                "outcome": "refused",
                "seconds": 1e-5,
                "json_loads_seconds": 0.419,
                "peak_bytes": 0,
            },
        ],
    ),
    "padding_check": envelope(
        "padding_check",
        "decode without the check",
        goal_ratio=1.1,
        rows=[
            {"leaves": 2, "leaf_bytes": 3, "with_check_s": 20.4e-6, "without_s": 18.9e-6, "ratio": 1.08},
            {"leaves": 1024, "leaf_bytes": 1, "with_check_s": 1e-3, "without_s": 1e-3, "ratio": 1.0},
        ],
    ),
    "dora_latency": envelope("dora_latency", "send_output_raw", rows=latency_rows()),
    "camera_fps": envelope(
        "camera_fps",
        "pa.array",
        width=1920,
        height=1080,
        target_fps=60.0,
        frames=600,
        fps_tolerance=0.99,
        p99_goal_ms=20.0,
        summary=[
            {
                "contender": c,
                "fps": fps,
                "p50": p50,
                "p99": p99,
                "received": 600,
                "missing": 0,
                "bad": 0,
                "rounds": 2,
                "fps_ratio": fps / 59.3,
                "p50_ratio": p50 / 5.7,
                "p99_ratio": p99 / 9.7,
                "goal_met": fps > 59.4,
            }
            for c, fps, p50, p99 in (("pa.array", 59.3, 5.7, 9.7), ("tc", 60.0, 1.9, 2.7), ("raw", 60.0, 1.8, 2.6))
        ],
        runs=[
            {"contender": c, "round": 1, "cpu_dataflow": 1.0, "cpu_other": other}
            for c, other in (("pa.array", 0.02), ("tc", None), ("raw", 0.9))
        ],
    ),
    "jpeg_fps": envelope("jpeg_fps", "PIL, one thread", rows=jpeg_rows()),
    "cross_daemon": envelope(
        "cross_daemon",
        "the same-daemon path",
        device="cpu",
        goal_ratio=2.0,
        clusters=[
            {"cluster": "loopback", "host": "127.0.0.1", "error": None, "rows": cross_rows(8.0, True)},
            {"cluster": "host address", "host": "192.0.2.2", "error": None, "rows": cross_rows(1.05, False)},
        ],
    ),
    "cuda_ipc": envelope(
        "cuda_ipc",
        ".cpu() -> dora -> .cuda()",
        rows=[
            {
                "contender": c,
                "size_kb": kb,
                "p50_ms": (0.2 if c == "cuda-ipc" else 0.3 + kb / 500),
                "baseline": c != "cuda-ipc",
            }
            for c in ("cuda-ipc", "cpu+host+cuda")
            for kb in (4, 1024, 16384, 65536)
        ],
    ),
    "host_staging": envelope(
        "host_staging",
        "plain copy_",
        rows=[{"kb": kb, "d2h_ratio": r, "h2d_ratio": r * 1.1} for kb, r in ((256, 0.8), (1024, 1.1), (65536, 2.0))],
    ),
}
EXPECTED_PNGS = {f"{name}.png" for name in SAMPLES} | {"jpeg_fps_cuda.png"}


def write_samples(folder: Path, samples: dict = SAMPLES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in samples.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    return folder


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; fails on anything that is not a PNG."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path.name} is not a PNG"
    return struct.unpack(">II", head[16:24])


def draw(results: Path, out: Path, capsys) -> tuple[int, str, str]:
    rc = plots.main(["--results", str(results), "--out", str(out)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.slow  # draws every plot
def test_every_benchmark_is_drawn_as_a_sane_png(tmp_path, capsys):
    import_or_skip("matplotlib")
    rc, out, err = draw(write_samples(tmp_path / "results"), tmp_path / "img", capsys)
    assert rc == 0, err
    assert {p.name for p in (tmp_path / "img").iterdir()} == EXPECTED_PNGS
    for png in (tmp_path / "img").iterdir():
        width, height = png_size(png)
        assert 400 <= width <= 2000 and 200 <= height <= 2000, (png.name, width, height)
        assert 5_000 < png.stat().st_size < 300_000, png.name
    assert "skipped" not in out and err == ""


def test_a_figure_names_the_machine_the_date_and_the_baseline(tmp_path):
    matplotlib = import_or_skip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plots.plot_small_message(plt, SAMPLES["small_message"])["small_message.png"]
    texts = " ".join(t.get_text() for t in fig.texts)
    plt.close(fig)
    assert "Linux x86_64, 2 CPUs (Test CPU), no GPU" in texts
    assert "2026-11-23 08:34 UTC" in texts
    assert "ratios against: pa.array + from_numpy" in texts


def test_dora_latency_keeps_the_compared_lines_readable_among_the_primitives():
    """The contiguous panel also carries dora's primitives and tc with one forced: each has its own
    colour (they were all the fallback red, over tc's and pa.array's lines), drawn thin and dashed
    without a band; the baseline, tc and pa.array keep their markers and bands."""
    matplotlib = import_or_skip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    primitives = ["send_output", "tc:send_output", "tc:send_output_raw", "send_output:uint8"]
    rows = latency_rows() + [
        {
            "layout": "contiguous",
            "contender": c,
            "size_mb": size,
            "messages": 15,
            "p50_ms": 0.4 + size * 0.16,
            "p10_ms": 0.35 + size * 0.15,
            "p90_ms": 0.5 + size * 0.2,
            "baseline": False,
        }
        for c in primitives
        for size in (1, 4, 16, 64)
    ]
    fig = plots.plot_dora_latency(plt, envelope("dora_latency", "send_output_raw", rows=rows))["dora_latency.png"]
    contiguous = fig.axes[0]
    lines = {line.get_label(): line for line in contiguous.get_lines() if not line.get_label().startswith("_")}
    bands = len(contiguous.collections)
    plt.close(fig)
    assert set(lines) == {"raw", "tc", "pa.array", *primitives}
    assert len({matplotlib.colors.to_hex(line.get_color()) for line in lines.values()}) == len(lines)
    for name in primitives:
        assert lines[name].get_linestyle() == "--" and lines[name].get_marker() in ("None", None, "")
    for name in ("raw", "tc", "pa.array"):
        assert lines[name].get_linestyle() == "-" and lines[name].get_marker() == "o"
    assert bands == 3  # p10 to p90 of the three compared lines only


def test_missing_and_skipped_benchmarks_are_listed_not_errors(tmp_path, capsys):
    import_or_skip("matplotlib")
    samples = {  # a machine without CUDA: cuda_ipc not run, host_staging skipped, no CUDA JPEG rows
        "small_message": SAMPLES["small_message"],
        "host_staging": envelope("host_staging", "plain copy_", skipped="no CUDA device on this machine"),
        "jpeg_fps": envelope("jpeg_fps", "PIL", rows=[r for r in jpeg_rows() if r["device"] == "cpu"]),
    }
    rc, out, err = draw(write_samples(tmp_path / "results", samples), tmp_path / "img", capsys)
    assert rc == 0 and err == ""
    assert f"skipped cuda_ipc (no {tmp_path / 'results' / 'cuda_ipc.json'})" in out
    assert "skipped host_staging (no CUDA device on this machine)" in out
    assert "skipped jpeg_fps_cuda.png (no CUDA rows in this run)" in out
    assert sorted(p.name for p in (tmp_path / "img").iterdir()) == ["jpeg_fps.png", "small_message.png"]


def test_a_malformed_file_is_named_with_its_field_and_the_others_are_drawn(tmp_path, capsys):
    import_or_skip("matplotlib")
    bad = json.loads(json.dumps(SAMPLES["padding_check"]))
    bad["rows"][1]["ratio"] = "fast"
    no_cpus = dict(SAMPLES["camera_fps"], machine={**MACHINE, "cpus": None})
    results = write_samples(
        tmp_path / "results",
        {
            "small_message": SAMPLES["small_message"],
            "padding_check": bad,
            "camera_fps": no_cpus,
            "decode_scaling": SAMPLES["decode_scaling"],
        },
    )
    (results / "cross_daemon.json").write_text('{"benchmark": ')
    rc, out, err = draw(results, tmp_path / "img", capsys)
    assert rc == 1
    assert len(err.strip().splitlines()) == 3, err
    assert f"{results / 'padding_check.json'}: field 'rows[1].ratio': expected a number, found \"fast\"" in err
    assert f"{results / 'camera_fps.json'}: field 'machine.cpus': expected a number, found null" in err
    assert f"{results / 'cross_daemon.json'}: not JSON: " in err
    assert sorted(p.name for p in (tmp_path / "img").iterdir()) == ["decode_scaling.png", "small_message.png"]


def test_a_missing_envelope_field_is_named(tmp_path, capsys):
    import_or_skip("matplotlib")
    data = {k: v for k, v in SAMPLES["small_message"].items() if k != "baseline"}
    results = write_samples(tmp_path / "results", {"small_message": data})
    rc, _, err = draw(results, tmp_path / "img", capsys)
    assert rc == 1 and "small_message.json: field 'baseline': expected text, found nothing (missing)" in err


def test_without_matplotlib_it_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    rc, _, err = draw(write_samples(tmp_path / "results"), tmp_path / "img", capsys)
    assert rc == 2
    assert "pip install matplotlib" in err and "pip install -e '.[plots]'" in err
    assert not (tmp_path / "img").exists()


@pytest.mark.slow  # runs real benchmarks
def test_real_benchmarks_write_results_the_plotter_draws(tmp_path, capsys):
    """small_message and decode_scaling, with a handful of calls each (the figures mean nothing
    here), run as scripts in one interpreter (torch is imported once: the test stays fast)."""
    import_or_skip("matplotlib")
    results = tmp_path / "results"
    runs = [
        (BENCH / "small_message.py", ["--batch", "5", "--batches", "1", "--json", str(results / "small_message.json")]),
        (
            BENCH / "decode_scaling.py",
            ["--batch", "5", "--batches", "1", "--json", str(results / "decode_scaling.json")],
        ),
    ]
    code = (
        "import runpy, sys, json\n"
        f"for script, args in {[(str(s), a) for s, a in runs]!r}:\n"
        "    sys.argv = [script, *args]\n"
        "    runpy.run_path(script, run_name='__main__')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("small_message", "decode_scaling"):
        data = json.loads((results / f"{name}.json").read_text())
        assert data["benchmark"] == name and data["baseline"] and data["date"].endswith("+00:00")
        assert data["machine"]["cpus"] >= 1 and data["machine"]["torch"] and "gpu" in data["machine"]
        assert data["rows"] and all(r["us"] > 0 for r in data["rows"])
    rc, out, err = draw(results, tmp_path / "img", capsys)
    assert rc == 0, err
    assert sorted(p.name for p in (tmp_path / "img").iterdir()) == ["decode_scaling.png", "small_message.png"]
    for png in (tmp_path / "img").iterdir():
        png_size(png)
