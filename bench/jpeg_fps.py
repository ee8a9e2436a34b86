"""JPEG encoding (issue 5) and decoding (issue 34) throughput: frames per second at 1080p and 4K,
quality 90, for every JPEG engine of the encoder and decoder nodes that can run here
(ENGINE=torchcodec, torchvision, nvimgcodec; each on the CPU and, when CUDA is present, on the GPU),
side by side with PIL in one run.

    python bench/jpeg_fps.py [--frames 48] [--sizes 1080p,4k] [--engines torchcodec,...]
                             [--device cpu|cuda|all] [--codec encode,decode] [--rounds 7]
                             [--json PATH (default out/bench/jpeg_fps.json)]

Decoding is measured as encoding is (engine alone, node path, against PIL's decoder; its goals on
CUDA: the node path at least 90 % of its engine and 3x the best CPU node path): bench/_jpeg_decode.py
says how. What follows is the encoding half.

Each engine is measured twice:
  * engine alone: `submit` batches keeping every worker busy, frames made beforehand;
  * node path: what the encoder node does per message, minus dora: `JpegEncoder.accept` of an
    INPUT event (restore the message, check the frame) -> `dispatch` -> `collect` (JPEGs in input
    order, each header read back). On the CPU the events are tensor_codec messages of interleaved
    frames, what the camera node sends with LAYOUT=interleaved (the codec keeps their strides).
    On CUDA they are CUDA IPC messages of interleaved frames on the GPU, sent by a producer
    process started by this script (a process cannot open its own CUDA IPC messages): the frames
    never leave the GPU, as from the camera node with DEVICE=cuda, TRANSPORT=cuda-ipc. The
    producer's own rate is printed too (`CUDA IPC messages alone`: receive + release, no encode).

PIL gets its most favourable input: an (H, W, C) uint8 array made beforehand, one thread. CPU
engines run BATCH 4 with one worker per core; on CUDA each engine's node path is first swept over
BATCH x WORKERS and its best setting is the one measured (and the one its engine-alone row uses).
Subsampling is each engine's `auto` (4:2:0 on the CPU and for nvImageCodec; TorchCodec's and
torchvision's nvJPEG write 4:4:4 only). The contenders take turns over --rounds rounds, each round
starting one contender further on; the median counts. Ratios > 1 mean faster than PIL. Goals:
TorchCodec's CPU node path at least as fast as torchvision's (each size; the median of the
rounds' ratios, as the two are measured in the same round); on CUDA, the best engine's node path
at least 600 4K frames per second and at least 10x the best CPU node path of this host. A goal
this machine cannot measure (no CUDA, an engine missing) is reported as not measured.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# torchvision.io's codecs warn on every call since torchvision 0.29 (deprecated in favour of
# TorchCodec). ENGINE=torchvision is measured here on purpose; the warning says nothing about speed.
warnings.filterwarnings(
    "ignore", message="The image decoding and encoding capabilities of TorchVision", category=DeprecationWarning
)

import pyarrow as pa  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import tensor_codec as tc  # noqa: E402
from tensor_codec.transports import ENCODE_OUTPUT  # noqa: E402
from tensor_codec_nodes.common.jpeg_engines import ENGINES, choose_encoder  # noqa: E402
from tensor_codec_nodes.common.pattern import render  # noqa: E402
from tensor_codec_nodes.jpeg_encoder.engines import make_engine  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _jpeg_decode  # noqa: E402
from _encoder_path import PathTiming, encoder_path, engine_alone  # noqa: E402
from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save  # noqa: E402
from _rounds import interleaved  # noqa: E402

# qvga is not in the default run: a size for smoke tests (tests/bench), where every path runs in moments.
SIZES = {"1080p": (1080, 1920), "4k": (2160, 3840), "qvga": (240, 320)}
QUALITY = 90
ROUNDS = 7  # each contender runs --rounds times (default ROUNDS), interleaved with the others; the median counts
CPU_BATCH = 4  # the node's default BATCH
GPU_BATCHES = (1, 8, 32)
GPU_WORKERS = (1, 2, 4)
GPU_FRAMES = 10  # a GPU measurement encodes GPU_FRAMES x --frames frames (at least two full rounds of batches)
GOAL_4K_FPS = 600
GOAL_GPU_OVER_CPU = 10
FEED_CAP = (
    16 << 30
)  # the IPC producer's bytes in flight: up to BATCH x WORKERS frames held by the encoder, plus the pipe
EMPTY = pa.array([], type=pa.uint8())
SUB = {"420": "4:2:0", "444": "4:4:4"}
PIL_LABEL = "PIL (baseline), 1 thread"
BASELINE = "PIL's JPEG encoder on one thread, (H, W, C) uint8 frames made beforehand, in the same rounds"


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def setting(batch: int, workers: int) -> str:
    return f"batch {batch}, {workers} worker{'' if workers == 1 else 's'}"


def frame_event(metadata: dict, value=EMPTY) -> dict:
    return {"type": "INPUT", "id": "frames", "value": value, "metadata": metadata}


# -- the CUDA IPC producer ------------------------------------------------------------------------


def _feeder_main(conn, index: int) -> None:
    """The producer process: renders interleaved frames on cuda:`index` and sends `n` CUDA IPC
    messages of them on ("send", n); each message's metadata goes down the pipe (its Arrow value
    is empty). The pipe and the in-flight cap pace it."""
    try:
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        tc.ipc_configure(ENCODE_OUTPUT, max_bytes_in_flight=FEED_CAP, timeout_s=120.0)
        frames, k = [], 0
        conn.send(("ready", None))
        while True:
            command = conn.recv()
            if command is None:
                break
            if command[0] == "size":
                _, height, width = command
                frames = [tv_tensors.Image(render(i, height, width, device=device, hwc=True)) for i in range(4)]
                torch.cuda.synchronize(device)
                conn.send(("ok", None))
            elif command[0] == "send":
                for _ in range(command[1]):
                    conn.send(tc.encode(frames[k % len(frames)], transport="cuda-ipc")[1])
                    k += 1
    except Exception as e:  # said to the parent, which stops using the producer
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        except Exception:
            pass
    finally:
        tc.ipc_flush(10.0)  # its GPU memory dies with it: let the receiver finish first


class IpcFeeder:
    """The parent's end of the producer process."""

    broken: str | None = None  # why it cannot be used any more

    def __init__(self, index: int):
        context = multiprocessing.get_context("spawn")  # CUDA cannot be used in a forked child
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_feeder_main, args=(child, index), daemon=True, name="jpeg-bench-ipc-producer"
        )
        self.process.start()
        child.close()
        self._expect("ready", 120.0)

    def _expect(self, tag: str, timeout_s: float):
        if not self.conn.poll(timeout_s):
            raise RuntimeError(f"the CUDA IPC producer did not answer ({tag}) within {timeout_s:.0f} s")
        got, detail = self.conn.recv()
        if got != tag:
            raise RuntimeError(f"the CUDA IPC producer failed: {detail}")
        return detail

    def use_size(self, height: int, width: int) -> None:
        self.conn.send(("size", height, width))
        self._expect("ok", 60.0)

    def events(self, n: int):
        """Asks for `n` messages now; yields their INPUT events as they arrive. Messages left
        unread (the consumer failed) are drained, so the next measurement starts clean."""
        if self.broken:
            raise RuntimeError(f"the CUDA IPC producer failed earlier: {self.broken}")
        self.conn.send(("send", n))
        got = 0
        try:
            while got < n:
                metadata = self._next()
                got += 1
                yield frame_event(metadata)
        finally:
            while got < n and not self.broken:  # unclaimed: the producer reclaims them after its claim timeout
                try:
                    self._next()
                except RuntimeError:
                    break
                got += 1

    def _next(self) -> dict:
        if not self.conn.poll(60.0):
            self.broken = "it sent nothing for 60 s"
            raise RuntimeError(f"the CUDA IPC producer {self.broken}")
        metadata = self.conn.recv()
        if isinstance(metadata, tuple):
            self.broken = str(metadata[1])
            raise RuntimeError(f"the CUDA IPC producer failed: {self.broken}")
        return metadata

    def close(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(30)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)


# -- measurements ---------------------------------------------------------------------------------


def pil_fps(frames_hwc, n: int) -> float:
    start = time.perf_counter()
    for k in range(n):
        buffer = io.BytesIO()
        Image.fromarray(frames_hwc[k % len(frames_hwc)]).save(buffer, format="JPEG", quality=QUALITY)
    return n / (time.perf_counter() - start)


def feed_fps(events, device: torch.device, n: int) -> float:
    """The CUDA IPC messages alone: receive (claim, open, wait on the producer's event) + release."""
    start = time.perf_counter()
    for event in events:
        tc.release(tc.receive(event, device=device))
    torch.cuda.synchronize(device)
    return n / (time.perf_counter() - start)


@dataclass
class Contender:
    label: str
    device: str  # "cpu" or "cuda"
    engine: str  # an ENGINES name; "" for the IPC feed
    kind: str  # "engine", "node" or "feed"
    batch: int
    workers: int
    n: int


class Bench:
    def __init__(self, args, cuda: torch.device | None):
        self.args = args
        self.cuda = cuda
        self.cores = cpu_cores()
        self.engines: dict[tuple[str, str, int], object] = {}
        self.feeder: IpcFeeder | None = None
        self.feed_error: str | None = None
        self.frames: dict[str, list] = {}
        self.cpu_events: list[dict] = []
        self.timings: dict[str, list[PathTiming]] = {}  # node path rows: where the main thread's time went
        self.described: set[str] = set()  # CUDA engines whose describe() was printed

    # engines, made once per (name, device, workers) and kept for the rounds
    def engine(self, name: str, device: str, workers: int):
        key = (name, device, workers)
        if key not in self.engines:
            choice = choose_encoder(name, "auto", self.cuda if device == "cuda" else "cpu")
            self.engines[key] = make_engine(
                choice, self.cuda if device == "cuda" else torch.device("cpu"), QUALITY, workers
            )
            if device == "cuda" and name not in self.described:  # which backend each engine runs on
                self.described.add(name)
                print(f"    encoder: {self.engines[key].describe()}", flush=True)
        return self.engines[key]

    def drop_engine(self, name: str, device: str, workers: int) -> None:
        engine = self.engines.pop((name, device, workers), None)
        if engine is not None:
            engine.close()

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()
        self.engines.clear()
        if self.feeder is not None:
            self.feeder.close()
            self.feeder = None

    def start_feeder(self) -> None:
        if self.feeder is None and self.feed_error is None:
            try:
                self.feeder = IpcFeeder(self.cuda.index)
            except Exception as e:
                self.feed_error = f"{type(e).__name__}: {e}"
                print(
                    f"  CUDA IPC producer unavailable ({self.feed_error}): the GPU node path gets host messages copied "
                    "to the GPU instead"
                )

    def set_size(self, height: int, width: int) -> None:
        self.frames["cpu"] = [render(i, height, width, hwc=True) for i in range(4)]  # interleaved (C, H, W) views
        self.cpu_events = []
        for f in self.frames["cpu"]:  # what the camera node sends with LAYOUT=interleaved
            value, metadata = tc.encode(tv_tensors.Image(f))
            self.cpu_events.append(frame_event(metadata, value))
        self.hwc = [f.permute(1, 2, 0).numpy() for f in self.frames["cpu"]]
        if self.cuda is not None:
            self.frames["cuda"] = [render(i, height, width, device=self.cuda, hwc=True) for i in range(4)]
            torch.cuda.synchronize(self.cuda)
            if self.feeder is not None:
                try:
                    self.feeder.use_size(height, width)
                except Exception as e:
                    self.feed_error = f"{type(e).__name__}: {e}"
                    print(
                        f"  CUDA IPC producer failed ({self.feed_error}): the GPU node path gets host messages copied "
                        "to the GPU instead"
                    )
                    self.feeder.close()
                    self.feeder = None

    def measure(self, c: Contender) -> float:
        if c.kind == "feed":
            events = self.feeder.events(c.n)
            try:
                return feed_fps(events, self.cuda, c.n)
            finally:
                events.close()
        engine = self.engine(c.engine, c.device, c.workers)
        if c.kind == "engine":
            return engine_alone(engine, self.frames[c.device], c.n, c.batch)
        if c.device == "cuda" and self.feeder is not None:
            events = self.feeder.events(c.n)
        else:  # CPU, or CUDA without the producer: host messages (restored onto the GPU by accept)
            events = (self.cpu_events[k % len(self.cpu_events)] for k in range(c.n))
        try:
            timing = encoder_path(engine, c.batch, events, c.n, QUALITY)
        finally:
            events.close()
        self.timings.setdefault(c.label, []).append(timing)
        return timing.fps


def engine_names(args, device: str) -> list[str]:
    """The engines asked for that can run on `device` here; says why each other one cannot."""
    return _jpeg_decode.available(args.engines, device)


def subsampling_of(name: str, device) -> str:
    return SUB[choose_encoder(name, "auto", device).subsampling]


def sweep_gpu(bench: Bench, name: str, frames: int) -> tuple[tuple[int, int] | None, dict]:
    """The GPU node path of engine `name` at every BATCH x WORKERS: -> (best (batch, workers), figures)."""
    figures, best = {}, None
    for workers in GPU_WORKERS:
        for batch in GPU_BATCHES:
            n = max(GPU_FRAMES * frames, 2 * batch * workers)
            try:
                bench.measure(
                    Contender("sweep", "cuda", name, "node", batch, workers, min(n, batch * workers))
                )  # warm-up
                fps = bench.measure(Contender("sweep", "cuda", name, "node", batch, workers, n))
            except Exception as e:
                print(
                    f"    {name} CUDA node path, {setting(batch, workers)}: failed ({type(e).__name__}: {str(e)[:300]})"
                )
                continue
            figures[setting(batch, workers)] = fps
            if best is None or fps > figures[setting(*best)]:
                best = (batch, workers)
        if best is None or best[1] != workers:
            bench.drop_engine(name, "cuda", workers)
    for workers in GPU_WORKERS:  # only the best setting's engine is kept for the rounds
        if best is None or best[1] != workers:
            bench.drop_engine(name, "cuda", workers)
    return best, figures


def table_rows(
    size: str, contenders: list[Contender], fps: dict[str, float], base: float, failed: dict[str, str]
) -> list[dict]:
    """One row per contender of a size, PIL first, as the plots read them: which engine, where,
    engine alone or node path, at what setting, its median fps and its ratio to PIL (a failed
    contender has no fps and says why)."""
    out = [
        {
            "size": size,
            "label": PIL_LABEL,
            "engine": "PIL",
            "device": "cpu",
            "kind": "baseline",
            "batch": 1,
            "workers": 1,
            "fps": fps[PIL_LABEL],
            "ratio": 1.0,
            "error": None,
        }
    ]
    for c in contenders:
        value = fps.get(c.label)
        out.append(
            {
                "size": size,
                "label": c.label,
                "engine": c.engine or "CUDA IPC",
                "device": c.device,
                "kind": c.kind,
                "batch": c.batch,
                "workers": c.workers,
                "fps": value,
                "ratio": None if value is None else value / base,
                "error": failed.get(c.label),
            }
        )
    return out


def not_measured(name: str, target: str, unit: str, why: str) -> dict:
    return {"name": name, "measured": None, "target": target, "unit": unit, "met": None, "detail": why}


def show_goals(goals: list[dict]) -> None:
    for g in goals:
        if g["met"] is None:
            print(f"  not measured  {g['name']} ({g['detail']})")
        else:
            print_goals([g])


# -- the command line -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=48, help=f"frames per CPU measurement (GPU: {GPU_FRAMES} x this)")
    parser.add_argument("--sizes", default="1080p,4k", help="comma-separated: " + ", ".join(SIZES))
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset of: " + ", ".join(ENGINES))
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda", "all"),
        default="all",
        help="where engines run (all: the CPU, and CUDA when present)",
    )
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"interleaved rounds, the median counts (default {ROUNDS})"
    )
    parser.add_argument("--codec", default="encode,decode", help="comma-separated: encode, decode (default both)")
    add_json_option(parser, "jpeg_fps")
    return parser


def parse_args(argv) -> argparse.Namespace:
    """The options, the comma-separated ones split into lists; a value out of range (or --device
    cuda without CUDA) stops here with argparse's usage error, checked in this order."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    args.codec = [c for c in args.codec.split(",") if c]
    if not args.codec or any(c not in ("encode", "decode") for c in args.codec):
        parser.error(f"--codec: expected encode, decode or both, got {','.join(args.codec)!r}")
    args.sizes = [s for s in args.sizes.split(",") if s]
    args.engines = [e for e in args.engines.split(",") if e]
    for s in args.sizes:
        if s not in SIZES:
            parser.error(f"--sizes: expected some of {', '.join(SIZES)}, got {s!r}")
    for e in args.engines:
        if e not in ENGINES:
            parser.error(f"--engines: expected some of {', '.join(ENGINES)}, got {e!r}")
    if args.frames < 1:
        parser.error("--frames: expected at least 1")
    if args.rounds < 1:
        parser.error("--rounds: expected at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine")
    return args


def cuda_of(args) -> torch.device | None:
    """The GPU the CUDA contenders run on; None without CUDA or with --device cpu."""
    if torch.cuda.is_available() and args.device != "cpu":
        return torch.device("cuda", torch.cuda.current_device())
    return None


def gpu_name(cuda: torch.device | None) -> str | None:
    return torch.cuda.get_device_name(cuda) if cuda is not None else None


def print_header(rounds: int, cores: int, cuda: torch.device | None) -> None:
    print(
        f"JPEG encoding at quality {QUALITY}: frames per second (median of {rounds} interleaved rounds), "
        "ratio against PIL"
    )
    print(f"  CPU: {cores} cores; GPU: {gpu_name(cuda) if cuda is not None else 'none'}; torch {torch.__version__}")


# -- one size's contenders ------------------------------------------------------------------------


def cpu_contenders(names: list[str], cores: int, n: int) -> list[Contender]:
    """Each CPU engine alone, then each one's node path: the node paths next to each other, as the
    goal compares them round by round."""
    engines, nodes = [], []
    for name in names:
        where = f"{setting(CPU_BATCH, cores)}, {subsampling_of(name, 'cpu')}"
        engines.append(Contender(f"{name}, CPU, engine alone ({where})", "cpu", name, "engine", CPU_BATCH, cores, n))
        nodes.append(Contender(f"{name}, CPU, node path ({where})", "cpu", name, "node", CPU_BATCH, cores, n))
    return engines + nodes


def gpu_contenders(bench: Bench, names: list[str], frames: int, sweeps: dict) -> list[Contender]:
    """Each CUDA engine swept over BATCH x WORKERS (its figures into `sweeps`, printed), then at its
    best setting: the engines alone, then the node paths. An engine with no setting that ran is left out."""
    engines, nodes = [], []
    for name in names:
        best, sweeps[name] = sweep_gpu(bench, name, frames)
        if sweeps[name]:
            print(
                f"    sweep, {name} CUDA node path: "
                + ", ".join(f"{k} {v:.0f}" for k, v in sweeps[name].items())
                + " fps"
            )
        if best is None:
            continue
        batch, workers = best
        n = max(GPU_FRAMES * frames, 2 * batch * workers)
        where = f"{setting(batch, workers)}, {subsampling_of(name, bench.cuda)}"
        source = "CUDA IPC frames" if bench.feeder is not None else "host messages"
        engines.append(Contender(f"{name}, CUDA, engine alone ({where})", "cuda", name, "engine", batch, workers, n))
        nodes.append(Contender(f"{name}, CUDA, node path ({where}; {source})", "cuda", name, "node", batch, workers, n))
    return engines + nodes


def feed_contender(frames: int) -> Contender:
    """The CUDA IPC producer's own rate: what the GPU node paths' input costs without encoding."""
    label = "CUDA IPC messages alone (receive + release, no encode)"
    return Contender(label, "cuda", "", "feed", 1, 1, GPU_FRAMES * frames)


# -- the rounds and what they print ---------------------------------------------------------------


@dataclass
class Measured:
    """One size's rounds: every round's figures per label (PIL's included), their medians, why
    each failed contender failed, and PIL's median (what the ratios are against)."""

    size: str
    rows: list[Contender]
    results: dict[str, list[float]]
    fps: dict[str, float]
    failed: dict[str, str]
    base: float

    def node_label(self, name: str, device: str) -> str | None:
        """The label of engine `name`'s node path on `device`, if it was measured."""
        return next(
            (
                c.label
                for c in self.rows
                if c.engine == name and c.device == device and c.kind == "node" and c.label in self.fps
            ),
            None,
        )

    def node_fps(self, name: str, device: str) -> float | None:
        label = self.node_label(name, device)
        return None if label is None else self.fps[label]


def run_rounds(bench: Bench, size: str, rows: list[Contender], rounds: int, frames: int) -> Measured:
    """The contenders and PIL, interleaved over `rounds`; -> their figures, the medians printed."""
    results, failed = interleaved(rows, rounds, bench.measure, PIL_LABEL, lambda: pil_fps(bench.hwc, frames))
    base = statistics.median(results[PIL_LABEL])
    fps = {label: statistics.median(values) for label, values in results.items()}
    for label, value in fps.items():
        print(f"    {label:<84} {value:8.1f} fps  {value / base:6.2f}x PIL")
    for label, why in failed.items():
        print(f"    {label:<84}   failed: {why}")
    return Measured(size, rows, results, fps, failed, base)


def node_path_breakdowns(bench: Bench, m: Measured) -> dict:
    """Where each measured node path's main thread spent its time, in its typical round (the median
    by rate; the warm-up's left out): printed, and -> {label: {"per_frame_us", "batches"}}."""
    out = {}
    for c in m.rows:
        timings = bench.timings.pop(c.label, [])[1:]
        if c.kind == "node" and timings and c.label in m.fps:
            typical = sorted(timings, key=lambda t: t.fps)[len(timings) // 2]
            print(f"    {c.label}: {typical.describe()}")
            out[c.label] = {"per_frame_us": typical.per_frame_us(), "batches": dict(typical.batches)}
    bench.timings.clear()  # the sweeps' timings too: the next size starts empty
    return out


# -- goals ----------------------------------------------------------------------------------------

TITLE_4K_FPS = f"4K GPU node path, best engine: >= {GOAL_4K_FPS} fps"
TITLE_4K_RATIO = f"4K GPU node path, best engine: >= {GOAL_GPU_OVER_CPU}x the best CPU node path"


def cpu_goal(m: Measured, cores: int) -> dict:
    """TorchCodec's CPU node path at least as fast as torchvision's at this size."""
    title = f"{m.size} CPU node path: torchcodec >= torchvision"
    labels = {name: m.node_label(name, "cpu") for name in ("torchcodec", "torchvision")}
    if labels["torchcodec"] is None or labels["torchvision"] is None:
        missing = [name for name, label in labels.items() if label is None]
        return not_measured(title, ">= 1", "x", f"no CPU node path figure for {' and '.join(missing)} in this run")
    tcodec, tvision = m.fps[labels["torchcodec"]], m.fps[labels["torchvision"]]
    # paired by round (the two run back to back): the machine's drift cancels out
    pairs = zip(m.results[labels["torchcodec"]], m.results[labels["torchvision"]])
    ratios = sorted(a / b for a, b in pairs)
    ratio = statistics.median(ratios)
    detail = (
        f"{ratio:.3f}x: the median of {len(ratios)} rounds' ratios, {ratios[0]:.2f} to {ratios[-1]:.2f}; "
        f"medians {tcodec:.1f} vs {tvision:.1f} fps, {cores} workers each"
    )
    return goal(title, ratio, ">=", 1, "x", detail)


def gpu_goals_4k(m: Measured, cuda: torch.device | None, cores: int) -> list[dict]:
    """The best CUDA engine's 4K node path: its rate, and its ratio to the best CPU node path."""
    cpu_best = max((v for v in (m.node_fps(n, "cpu") for n in ENGINES) if v is not None), default=None)
    gpu = {n: v for n in ENGINES if (v := m.node_fps(n, "cuda")) is not None}
    if not gpu:
        if not torch.cuda.is_available():
            why = "no CUDA on this machine"
        else:
            why = "--device cpu" if cuda is None else "no CUDA engine measured"
        return unmeasured_4k_goals(why)
    best_name = max(gpu, key=gpu.__getitem__)
    best_fps = gpu[best_name]
    goals = [
        goal(TITLE_4K_FPS, best_fps, ">=", GOAL_4K_FPS, "fps", f"{best_name}: {best_fps:.0f} fps on {gpu_name(cuda)}")
    ]
    if cpu_best is None:
        goals.append(
            not_measured(TITLE_4K_RATIO, f">= {GOAL_GPU_OVER_CPU}", "x", "no CPU node path figure in this run")
        )
    else:
        detail = f"{best_name}: {best_fps:.0f} fps vs {cpu_best:.0f} fps on {cores} CPU cores"
        goals.append(goal(TITLE_4K_RATIO, best_fps / cpu_best, ">=", GOAL_GPU_OVER_CPU, "x", detail))
    return goals


def unmeasured_4k_goals(why: str) -> list[dict]:
    return [
        not_measured(TITLE_4K_FPS, f">= {GOAL_4K_FPS}", "fps", why),
        not_measured(TITLE_4K_RATIO, f">= {GOAL_GPU_OVER_CPU}", "x", why),
    ]


# -- the whole run --------------------------------------------------------------------------------


@dataclass
class Encoding:
    """The encoding half's results, per size: medians, GPU sweeps, node path breakdowns; the
    table's rows and the goals, every size's in turn."""

    figures: dict = field(default_factory=dict)
    sweeps: dict = field(default_factory=dict)
    breakdowns: dict = field(default_factory=dict)
    table: list = field(default_factory=list)
    goals: list = field(default_factory=list)


def measure_encoding(bench: Bench, args) -> Encoding:
    """Every encoding contender at every size of --sizes, then the 4K goals if 4K was not among them."""
    out = Encoding()
    if "encode" not in args.codec:
        out.goals += report_goals(unmeasured_4k_goals("--codec without encode"))
        return out
    cpu_names = engine_names(args, "cpu") if args.device in ("cpu", "all") else []
    gpu_names = engine_names(args, "cuda") if bench.cuda is not None else []
    if gpu_names:
        bench.start_feeder()
    cpu_n = max(args.frames, 2 * CPU_BATCH * bench.cores)
    for size in args.sizes:
        measure_size(bench, args, size, cpu_names, gpu_names, cpu_n, out)
    if "4k" not in args.sizes:
        out.goals += report_goals(unmeasured_4k_goals("4k not in --sizes"))
    return out


def measure_size(
    bench: Bench, args, size: str, cpu_names: list[str], gpu_names: list[str], cpu_n: int, out: Encoding
) -> None:
    """One size: its contenders (the GPU ones swept first), the rounds, the breakdowns, the goals, into `out`."""
    h, w = SIZES[size]
    bench.set_size(h, w)
    print(f"\n  {size} ({w}x{h})")
    out.sweeps[size] = {}
    rows = cpu_contenders(cpu_names, bench.cores, cpu_n)
    rows += gpu_contenders(bench, gpu_names, args.frames, out.sweeps[size])
    if bench.feeder is not None and gpu_names:
        rows.append(feed_contender(args.frames))
    m = run_rounds(bench, size, rows, args.rounds, args.frames)
    out.figures[size] = m.fps
    out.breakdowns[size] = node_path_breakdowns(bench, m)
    out.table += table_rows(size, rows, m.fps, m.base, m.failed)
    goals = [cpu_goal(m, bench.cores)]
    if size == "4k":
        goals += gpu_goals_4k(m, bench.cuda, bench.cores)
    out.goals += report_goals(goals)


def report_goals(goals: list[dict]) -> list[dict]:
    show_goals(goals)
    return goals


def measure_decoding(args, cuda: torch.device | None, cores: int) -> dict | None:
    """The decoding half (bench/_jpeg_decode.py), or None without `decode` in --codec."""
    if "decode" not in args.codec:
        return None
    sizes = {s: SIZES[s] for s in args.sizes}
    return _jpeg_decode.measure(
        sizes, args.engines, cuda, args.device in ("cpu", "all"), args.frames, args.rounds, cores
    )


def results_json(args, bench: Bench, encoding: Encoding, decoding: dict | None) -> dict:
    """What is written to --json (beside bench/_results.py's envelope), in the order it was always written."""
    return {
        "device": gpu_name(bench.cuda),
        "cpu_cores": bench.cores,
        "fps": encoding.figures,
        "gpu_sweep_fps": encoding.sweeps,
        "gpu_node_input": None
        if bench.cuda is None
        else ("cuda-ipc" if bench.feed_error is None else f"host messages ({bench.feed_error})"),
        "rounds": args.rounds,
        "node_path_breakdown": encoding.breakdowns,
        "codec": args.codec,
        "decode": decoding,
        "rows": encoding.table,
        "goals": encoding.goals + (decoding["goals"] if decoding is not None else []),
    }


def main(argv=()):
    args = parse_args(argv)
    cuda = cuda_of(args)
    began = time.monotonic()
    bench = Bench(args, cuda)
    print_header(args.rounds, bench.cores, cuda)
    try:
        encoding = measure_encoding(bench, args)
    finally:
        bench.close()  # engines and the CUDA IPC producer go before decoding starts, also on failure
    decoding = measure_decoding(args, cuda, bench.cores)
    print(f"  ({time.monotonic() - began:.0f} s)")
    return save("jpeg_fps", BASELINE, results_json(args, bench, encoding, decoding), args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
