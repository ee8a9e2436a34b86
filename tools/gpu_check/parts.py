"""The parts of `make gpu-check`, in the order they run. Each takes the run's Context and returns
its Part (and the goals it measured). Without CUDA each does what the CPU can: the environment
report, collecting the gpu tests, writing the all-CUDA dataflows, starting the benchmarks (which
say there is no GPU); such parts are `skipped` unless that much already fails."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from . import engines, flows
from .engines import Case
from .report import FAIL, PASS, SKIPPED, Goal, Part
from .runner import ROOT, Context

ENVIRONMENT = r"""
import ctypes, importlib, json, os, platform, sys
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
def imports(module):
    try:
        importlib.import_module(module)
    except Exception as e:  # ImportError, or OSError from a native library that does not load
        return f"{module} does not import ({type(e).__name__}: {str(e).partition(chr(10))[0]})"
import torch, torchvision, pyarrow, tensor_codec  # tensor_codec checks the supported releases
info = {
    "python": platform.python_version(), "executable": sys.executable,
    "torch": torch.__version__, "torch_cuda": torch.version.cuda, "torchvision": torchvision.__version__,
    "pyarrow": pyarrow.__version__, "numpy": version("numpy"), "dora-rs": version("dora-rs"),
    "dora-rs-cli": version("dora-rs-cli"), "torchcodec": version("torchcodec"),
    "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "(unset)"),
    "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"),
    "cuda": torch.cuda.is_available(),
}
kind = "cuda" if info["cuda"] else "cpu"
# The optional engines (tools/gpu_check/engines.py): each one's version (None: not installed) and
# why it cannot be used here (None: it can).
optional = {
    "torchcodec": [version("torchcodec")], "nvimgcodec": [version("nvidia-nvimgcodec-cu13")],
    "torchvision": [torchvision.__version__], "rerun": [version("rerun-sdk"), imports("rerun")],
    "xdist": [version("pytest-xdist"), imports("xdist")],
}
try:  # which JPEG engines the nodes can use here, and what ENGINE=auto takes
    from tensor_codec_nodes.common.jpeg_engines import ENGINES, choose_encoder, unavailable
    for name in ENGINES:
        optional[name].append(unavailable(name, kind))
    info["jpeg encoder auto"] = choose_encoder("auto", "auto", kind).describe()
except Exception as e:
    info["jpeg encoder auto"] = f"{type(e).__name__}: {e}"
    for name in ("torchcodec", "nvimgcodec", "torchvision"):
        optional[name].append(f"the JPEG engines do not load ({type(e).__name__}: {e})")
info["optional"] = {key: {"version": found[0], "unavailable": found[1]} for key, found in optional.items()}
if info["cuda"]:
    p = torch.cuda.get_device_properties(0)
    info.update(device=torch.cuda.get_device_name(0), device_count=torch.cuda.device_count(),
                capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2**30, 1))
    try:
        v = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v))
        info["cuda_driver_api"] = f"{v.value // 1000}.{v.value % 1000 // 10}"
    except OSError:
        pass
print(json.dumps(info))
"""

GPU_TESTS, PIPELINE, CLUSTER = "gpu tests", "pipeline on CUDA", "two machines on CUDA"
RACE_TEST = "test_a_long_kernel_before_the_final_write_never_shows_stale_values"
RACE_TRIALS = 200  # tests/dora_nodes/ipc_probe.py, scenario "race"


def environment(ctx: Context) -> tuple[Part, list[Goal], dict]:
    """Versions, the device and its driver, the allocator settings. -> also the facts found."""
    ran = ctx.run([ctx.python, "-c", ENVIRONMENT], timeout=ctx.limit(90))
    if ran.returncode != 0:
        return (
            Part(
                "environment",
                FAIL,
                ran.seconds,
                "the interpreter cannot import torch, torchvision, pyarrow and tensor_codec",
                tail=ran.tail(),
            ),
            [],
            {},
        )
    info = last_json(ran.output)
    if not isinstance(info, dict):
        return Part("environment", FAIL, ran.seconds, "the environment report printed no JSON", tail=ran.tail()), [], {}
    dora = ctx.dora()
    if dora:
        info["dora CLI"] = ctx.run([dora, "--version"], timeout=30).output.strip() or "(no answer)"
    else:
        info["dora CLI"] = "not found"
    if info["cuda"]:
        smi = ctx.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], timeout=30)
        if smi.returncode == 0 and smi.output.strip():
            info["driver"] = smi.output.strip().splitlines()[0]
    needed = ctx.only != "jpeg"  # the JPEG engines' parts run without dora (issue 34)
    status = PASS if dora or not needed else FAIL
    summary = info.get("device", "no CUDA device") + (
        "" if dora else "; the dora CLI is missing" if needed else "; no dora CLI (not needed for --only jpeg)"
    )
    for engine in engines.expected_but_missing(info.get("optional") or {}):  # said here too, not only in the table
        summary += f"; {engine.name} MISSING (expected)"
    return Part("environment", status, ran.seconds, summary), [], info


def gpu_tests(ctx: Context) -> tuple[Part, list[Goal]]:
    """Every gpu-marked test, junit XML in OUT_DIR, on xdist workers where the interpreter has
    pytest-xdist (engines.workers). Without CUDA: that they are all collected."""
    xdist = (ctx.environment.get("optional") or {}).get("xdist") or {}
    have_xdist = bool(xdist.get("version")) and not xdist.get("unavailable")
    ctx.workers = engines.workers(os.environ.get("PYTEST_ADDOPTS"), engines.cpu_count(), have_xdist)
    if not ctx.cuda:
        ran = ctx.run(
            [
                ctx.python,
                "-m",
                "pytest",
                "-m",
                "gpu",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                *ctx.test_paths,
            ],
            timeout=ctx.limit(120),
        )
        match = re.search(r"(\d+)/\d+ tests collected", ran.output) or re.search(r"(\d+) tests? collected", ran.output)
        if ran.returncode != 0 or not match:
            return Part(GPU_TESTS, FAIL, ran.seconds, "the gpu tests do not collect", tail=ran.tail()), []
        count = int(match.group(1))
        return Part(
            GPU_TESTS, SKIPPED, ran.seconds, f"no CUDA: {count} gpu tests collected, none run", {"collected": count}
        ), []
    junit = ctx.out_dir / "gpu-tests.xml"
    ran = ctx.run(
        [
            ctx.python,
            "-m",
            "pytest",
            *ctx.workers.args,
            "-m",
            "gpu",
            "-q",
            "-rfE",
            "-p",
            "no:cacheprovider",
            "--durations=15",
            f"--junitxml={junit}",
            *ctx.test_paths,
        ],
        timeout=ctx.limit(300),
    )
    ctx.cases = read_cases(junit)
    counts, failed, race = tally(ctx.cases)
    summary = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    summary += f" ({ctx.workers.count} xdist workers)" if ctx.workers.count > 0 else ""
    if ran.timed_out:
        summary += f"; cut short after {ran.seconds:.0f} s"
    ok = ran.returncode == 0 and counts["failed"] == 0 and counts["passed"] > 0
    figures = {**counts, "failed tests": failed[:20]} if failed else dict(counts)
    figures["workers"] = ctx.workers.note
    race_goal = Goal(
        f"{RACE_TRIALS}/{RACE_TRIALS} CUDA IPC race trials without a stale value",
        f"{RACE_TRIALS}/{RACE_TRIALS}",
        None if race is None else (f"{RACE_TRIALS}/{RACE_TRIALS}" if race else "failed (gpu-tests.xml)"),
        "trials",
        race,
        RACE_TEST,
        GPU_TESTS,
    )
    return Part(GPU_TESTS, PASS if ok else FAIL, ran.seconds, summary, figures, "" if ok else ran.tail(60)), [race_goal]


def read_cases(path: Path) -> list[Case]:
    """The tests of a junit XML file (none where it is missing or unreadable). xdist's `@group`
    suffix (--dist loadgroup) is taken off their names."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return []
    cases = []
    for case in root.iter("testcase"):
        name = case.get("name", "")
        if name.rfind("@") > name.rfind("]"):
            name = name[: name.rfind("@")]
        outcome, message = "passed", ""
        for tag, said in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
            found = case.find(tag)
            if found is not None:
                outcome, message = said, (found.get("message") or "").partition("\n")[0]
                break
        cases.append(Case(case.get("classname", ""), name, outcome, message))
    return cases


def tally(cases: list[Case]) -> tuple[dict, list[str], bool | None]:
    """-> (counts, names of failed tests, whether the race test passed (None: it did not run))."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed: list[str] = []
    race = None
    for case in cases:
        counts[case.outcome] += 1
        if case.outcome == "failed":
            failed.append(f"{case.module}::{case.name}")
        if case.name == RACE_TEST:
            race = {"passed": True, "failed": False}.get(case.outcome)
    return counts, failed, race


def read_junit(path: Path) -> tuple[dict, list[str], bool | None]:
    """-> (counts, names of failed tests, whether the race test passed (None: it did not run))."""
    return tally(read_cases(path))


def pipeline(ctx: Context) -> tuple[Part, list[Goal]]:
    """The default pipeline (dataflow.yml) with every node on CUDA, through `dora run`."""
    flow, placed_ids, without = flows.variant_on(ctx.device, ROOT / "dataflow.yml", ctx.work / "pipeline", ctx.bindir)
    verb = "have" if len(without) > 1 else "has"
    total = len(placed_ids) + len(without)
    placed = f"{len(placed_ids)} of {total} nodes on {ctx.device} ({', '.join(without)} {verb} no device)"
    if not ctx.cuda:
        return Part(PIPELINE, SKIPPED, 0.0, f"no CUDA: the all-CUDA dataflow was written, not run: {placed}"), []
    ran = ctx.run([ctx.dora() or "dora", "run", flow], timeout=ctx.limit(120), cwd=flow.parent)
    report = _read_json(flow.parent / "out" / "receiver-report.json")
    if report is None:
        return Part(
            PIPELINE, FAIL, ran.seconds, f"no receiver report (dora run exited {ran.returncode})", tail=ran.tail(60)
        ), []
    figures = {"placement": placed, "restored on": report.get("device")}
    for name, stats in report.get("inputs", {}).items():
        figures[name] = {k: stats.get(k) for k in ("received", "good", "bad", "rejected", "missing", "transports")}
    ok = ran.returncode == 0 and report.get("ok") and str(report.get("device", "")).startswith(ctx.device)
    summary = (
        "receiver report ok"
        if ok
        else f"receiver report {'ok' if report.get('ok') else 'FAIL'}, dora run exited {ran.returncode}"
    )
    return Part(
        PIPELINE, PASS if ok else FAIL, ran.seconds, f"{summary}; {placed}", figures, "" if ok else ran.tail(60)
    ), []


def cluster(ctx: Context) -> tuple[Part, list[Goal]]:
    """dataflow-cluster.yml on two daemons (machines A and B) with CUDA tensors: A's receiver must
    get CUDA IPC, B's host bytes restored onto its GPU."""
    flow, placed_ids, _ = flows.variant_on(ctx.device, ROOT / "dataflow-cluster.yml", ctx.work / "cluster", ctx.bindir)
    if not ctx.cuda:
        return Part(
            CLUSTER,
            SKIPPED,
            0.0,
            f"no CUDA: the all-CUDA cluster dataflow was written ({len(placed_ids)} nodes on CUDA), not run",
        ), []
    limit = ctx.limit(120)
    reports = {m: f"out/cluster-report-{m}.json" for m in "AB"}
    ran = ctx.run(
        [
            ctx.python,
            "-m",
            "tools.local_cluster",
            flow,
            "--report",
            reports["A"],
            "--report",
            reports["B"],
            "--timeout",
            max(limit - 30, 10),
        ],
        timeout=limit,
        cwd=flow.parent,
    )
    figures, problems = {}, []
    local = "cuda-ipc" if ctx.device.startswith("cuda") else "host"  # CPU tensors always travel as host bytes
    for machine, transport in (("A", local), ("B", "host")):
        report = _read_json(flow.parent / reports[machine])
        if report is None:
            problems.append(f"no report from machine {machine}")
            continue
        big = report.get("inputs", {}).get("big", {})
        suite = report.get("inputs", {}).get("suite", {})
        figures[f"receiver on {machine}"] = {
            "ok": report.get("ok"),
            "device": report.get("device"),
            "big": big.get("transports"),
            "suite": suite.get("transports"),
        }
        if not report.get("ok"):
            problems.append(f"machine {machine}'s receiver report is not ok")
        if not str(report.get("device", "")).startswith(ctx.device):
            problems.append(f"machine {machine} restored on {report.get('device')}, expected {ctx.device}")
        if big.get("transports") != {transport: big.get("good")} or not big.get("good"):
            problems.append(f"machine {machine}: expected every big tensor by {transport}, got {big.get('transports')}")
    if ran.returncode != 0:
        problems.append(f"the cluster runner exited {ran.returncode}")
    ok = not problems
    summary = "A by CUDA IPC, B by host bytes onto its GPU, both reports ok" if ok else "; ".join(problems)
    return Part(CLUSTER, PASS if ok else FAIL, ran.seconds, summary, figures, "" if ok else ran.tail(60)), []


def benchmark(name: str, script: str, args: list[str], cap_s: float, floor_s: float):
    """A part running bench/<script> with --json; its goals come from the script itself. It may
    take up to `cap_s`; the parts before it leave it `floor_s` of the budget."""

    def part(ctx: Context) -> tuple[Part, list[Goal]]:
        if not ctx.cuda:  # that it starts (imports, options): what there is to check without a GPU
            ran = ctx.run([ctx.python, ROOT / "bench" / script, "--help"], timeout=ctx.limit(60))
            if ran.returncode != 0:
                return Part(name, FAIL, ran.seconds, f"it does not start (exit {ran.returncode})", tail=ran.tail()), []
            return Part(name, SKIPPED, ran.seconds, "no CUDA: it starts, nothing measured"), []
        out = ctx.work / f"{Path(script).stem}.json"
        ran = ctx.run([ctx.python, ROOT / "bench" / script, *args, "--json", out], timeout=ctx.limit(cap_s))
        result = _read_json(out)
        if ran.returncode != 0 or result is None:
            why = f"cut short after {ran.seconds:.0f} s" if ran.timed_out else f"exit {ran.returncode}"
            return Part(name, FAIL, ran.seconds, f"no figures ({why})", tail=ran.tail(60)), []
        if not isinstance(result, dict):
            return Part(
                name, FAIL, ran.seconds, f"its JSON is a {type(result).__name__}, not an object", tail=ran.tail()
            ), []
        goals = [
            Goal(
                str(g.get("name")),
                str(g.get("target")),
                g.get("measured"),
                str(g.get("unit", "")),
                g.get("met"),
                str(g.get("detail", "")),
                name,
            )
            for g in result.get("goals", [])
            if isinstance(g, dict)
        ]
        figures = {k: v for k, v in result.items() if k != "goals"}
        met = sum(1 for g in goals if g.met)
        return Part(name, PASS, ran.seconds, f"{met} of {len(goals)} goals met", figures), goals

    part.title, part.floor = name, floor_s
    return part


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def last_json(output: str):
    """The last line of `output` that is JSON (the command's own stderr is mixed in)."""
    for line in reversed(output.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


gpu_tests.title, pipeline.title, cluster.title = GPU_TESTS, PIPELINE, CLUSTER
# What each part is left of the budget by the parts before it (run_all's reserve), in seconds: on a
# 16-core H100 host the pipeline took 19 s, the whole check 210 s with the gpu tests on 6 workers.
gpu_tests.floor, pipeline.floor, cluster.floor = 60, 25, 30

JPEG_BENCH = benchmark("bench: JPEG", "jpeg_fps.py", ["--frames", "8", "--sizes", "4k"], 200, 25)
PARTS = [
    gpu_tests,
    pipeline,
    cluster,
    benchmark("bench: CUDA IPC", "cuda_ipc.py", ["--reps", "12", "--warmup", "3"], 90, 20),
    benchmark("bench: host copies", "host_staging.py", ["--reps", "6"], 45, 10),
    JPEG_BENCH,
]
# `--only jpeg`: the JPEG engines' gpu tests and benchmark rows, none of which needs dora, for a device
# call that carries nvImageCodec's wheels instead of dora's (both do not fit in one, issue 34).
JPEG_TESTS = ["tests/nodes/test_jpeg_gpu.py", "tests/nodes/test_jpeg_seed_002.py"]
JPEG_PARTS = [gpu_tests, JPEG_BENCH]
