"""JPEG decoding throughput, the decode half of jpeg_fps.py (issue 34): frames per second of every
decoder engine of the decoder node that can run here (CPU, and CUDA when present), alone and
through the decoder node's path, against PIL's decoder on one thread, in interleaved rounds.

  * engine alone: the engine's `decode` on WORKERS threads (each with its own CUDA stream on a
    GPU, the node's fence included), batches of prepared JPEGs keeping every thread busy;
  * node path: what the decoder node does per message, minus dora: `JpegDecoder.accept` of a JPEG
    message (its copy, the header walk, the crc check) -> `dispatch` to the workers -> `collect`
    (frames in input order, handed to the node's stream). The send of each frame is tc.send's
    (bench/cuda_ipc.py and dora_latency.py measure it) and not in these figures.
The JPEGs are the pattern's frames written by torchvision's CPU encoder at quality 90 (4:2:0).
CPU engines run BATCH 4 on one worker per core; on CUDA each engine's node path is swept over
GPU_SETTINGS and its best is measured, with its engine alone at the same setting. Goals on CUDA:
the best engine's 4K node path at least 90 % of that engine alone and at least 3x the best CPU
node path of this host."""

from __future__ import annotations

import contextlib
import io
import statistics
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import torch
from PIL import Image
from torchvision.io import encode_jpeg

from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.device import StreamPerThread
from tensor_codec_nodes.common.jpeg_engines import ENGINES, choose_decoder, unavailable
from tensor_codec_nodes.common.pattern import render
from tensor_codec_nodes.jpeg_decoder.decoder import JpegDecoder
from tensor_codec_nodes.jpeg_decoder.engines import make_decode_engine

QUALITY = 90
CPU_BATCH = 4
GPU_SETTINGS = ((1, 1), (8, 1), (8, 2), (32, 2))  # (BATCH, WORKERS) swept for the CUDA node path
GPU_FRAMES = 10  # a GPU measurement decodes GPU_FRAMES x --frames JPEGs
GOAL_OF_ENGINE = 0.90
GOAL_GPU_OVER_CPU = 3
PIL_LABEL = "PIL decode (baseline), 1 thread"


@dataclass
class Contender:
    label: str
    device: str  # "cpu" or "cuda"
    engine: str
    kind: str  # "engine" or "node"
    batch: int
    workers: int
    n: int


def setting(batch: int, workers: int) -> str:
    return f"batch {batch}, {workers} worker{'' if workers == 1 else 's'}"


def jpeg_messages(height: int, width: int, count: int = 4) -> tuple[list[torch.Tensor], list[dict]]:
    """`count` JPEGs of the pattern and their messages, as the encoder node sends them."""
    jpegs, events = [], []
    for i in range(count):
        data = encode_jpeg(render(i, height, width), quality=QUALITY)
        jpegs.append(data)
        metadata = {
            P.ENCODING: "jpeg",
            P.WIDTH: width,
            P.HEIGHT: height,
            P.CHANNELS: 3,
            P.QUALITY: QUALITY,
            P.FRAME: i,
            P.JPEG_CRC32: zlib.crc32(data.numpy()),
        }
        events.append({"type": "INPUT", "id": "jpeg", "value": pa.array(data.numpy()), "metadata": metadata})
    return jpegs, events


def pil_fps(jpegs: list[bytes], n: int) -> float:
    start = time.perf_counter()
    for k in range(n):
        Image.open(io.BytesIO(jpegs[k % len(jpegs)])).convert("RGB").load()
    return n / (time.perf_counter() - start)


def engine_fps(engine, jpegs: list[torch.Tensor], n: int, batch: int, workers: int) -> float:
    """The engine's decode on `workers` threads, each kept busy with batches of `batch` JPEGs."""
    cuda = engine.device.type == "cuda"
    streams = StreamPerThread(engine.device) if cuda else None

    def run(chunk):
        if not cuda:
            return engine.decode(chunk, [3] * len(chunk))
        with torch.cuda.device(engine.device), torch.cuda.stream(streams()):
            out = engine.decode(chunk, [3] * len(chunk))
            torch.cuda.current_stream(engine.device).synchronize()
            return out

    with ThreadPoolExecutor(workers) as pool:
        start = time.perf_counter()
        inflight, done, k = [], 0, 0
        while done < n:
            while k < n and len(inflight) < workers:
                chunk = [jpegs[(k + j) % len(jpegs)] for j in range(min(batch, n - k))]
                inflight.append(pool.submit(run, chunk))
                k += len(chunk)
            results = inflight.pop(0).result()
            bad = [r for r in results if isinstance(r, Exception)]
            if bad:
                raise RuntimeError(f"engine alone: {type(bad[0]).__name__}: {bad[0]}")
            done += len(results)
        return n / (time.perf_counter() - start)


def node_fps(engine, events: list[dict], n: int, batch: int, workers: int) -> float:
    """The decoder node's loop minus dora: accept -> dispatch -> collect, on the node's own stream."""
    decoder = JpegDecoder(engine, batch=batch, workers=workers)
    cuda = engine.device.type == "cuda"
    stream = torch.cuda.Stream(engine.device) if cuda else None
    try:
        with torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
            start = time.perf_counter()
            out = 0
            for k in range(n):
                while not decoder.can_accept:
                    decoder.dispatch()
                    out += len(decoder.collect(0.002))
                decoder.accept(events[k % len(events)])
                decoder.dispatch()
                out += len(decoder.collect())
            while decoder.busy:
                decoder.dispatch()
                out += len(decoder.collect(0.002))
            if cuda:
                stream.synchronize()  # the frames are made
            elapsed = time.perf_counter() - start
    finally:
        decoder.close()
    if out != n or decoder.stats.bad:
        raise RuntimeError(f"node path: {decoder.stats.summary()}; {'; '.join(decoder.stats.failures[:2])}")
    return n / elapsed


class DecodeBench:
    def __init__(self, cuda: torch.device | None):
        self.cuda = cuda
        self.engines: dict[tuple[str, str], object] = {}
        self.jpegs: list[torch.Tensor] = []
        self.events: list[dict] = []

    def engine(self, name: str, device: str):
        if (name, device) not in self.engines:
            where = self.cuda if device == "cuda" else torch.device("cpu")
            self.engines[(name, device)] = engine = make_decode_engine(choose_decoder(name, where), where)
            if device == "cuda":  # which backend it runs on (nvImageCodec: see common/nvimgcodec_backend)
                print(f"    decoder: {engine.describe()}", flush=True)
        return self.engines[(name, device)]

    def set_size(self, height: int, width: int) -> None:
        self.jpegs, self.events = jpeg_messages(height, width)
        self.pil = [bytes(j.numpy()) for j in self.jpegs]

    def measure(self, c: Contender) -> float:
        engine = self.engine(c.engine, c.device)
        if c.kind == "engine":
            return engine_fps(engine, self.jpegs, c.n, c.batch, c.workers)
        return node_fps(engine, self.events, c.n, c.batch, c.workers)


def available(engines: list[str], device: str, what: str = "") -> list[str]:
    """The engines of `engines` that can run on `device` here; says why each other one cannot
    (`what`: the line's prefix, "decode, " for decoding). jpeg_fps.py's encoding rows use it too."""
    out = []
    for name in engines:
        reason = unavailable(name, device)
        if reason:
            print(f"  {what}{name} on {device}: not available ({reason})")
        else:
            out.append(name)
    return out


def measure(
    sizes: dict[str, tuple[int, int]], engines: list[str], cuda, on_cpu: bool, frames: int, rounds: int, cores: int
) -> dict:
    """Every decode contender at every size -> {"fps", "rows", "gpu_sweep_fps", "goals"}."""
    from _goals import goal, print_goals  # bench/'s own helpers (jpeg_fps.py puts bench/ on the path)
    from _rounds import interleaved

    bench = DecodeBench(cuda)
    cpu_names = available(engines, "cpu", "decode, ") if on_cpu else []
    gpu_names = available(engines, "cuda", "decode, ") if cuda is not None else []
    cpu_n = max(frames, 2 * CPU_BATCH * cores)
    figures, table, sweeps, goals = {}, [], {}, []
    print(
        f"\nJPEG decoding (quality {QUALITY}, 4:2:0): frames per second, median of {rounds} rounds, ratio against PIL"
    )
    for size, (h, w) in sizes.items():
        bench.set_size(h, w)
        print(f"\n  {size} ({w}x{h}), decode")
        rows: list[Contender] = []
        for kind in ("engine", "node"):
            for name in cpu_names:
                what = "engine alone" if kind == "engine" else "node path"
                label = f"{name}, CPU, decode {what} ({setting(CPU_BATCH, cores)})"
                rows.append(Contender(label, "cpu", name, kind, CPU_BATCH, cores, cpu_n))
        sweeps[size] = {}
        for name in gpu_names:
            n = max(GPU_FRAMES * frames, 2 * 32 * 2)
            best = None
            for batch, workers in GPU_SETTINGS:
                try:
                    bench.measure(Contender("sweep", "cuda", name, "node", batch, workers, 2 * batch * workers))
                    fps = bench.measure(Contender("sweep", "cuda", name, "node", batch, workers, n))
                except Exception as e:
                    print(f"    decode sweep, {name} CUDA node path, {setting(batch, workers)}: failed ({e!s:.300})")
                    continue
                sweeps[size].setdefault(name, {})[setting(batch, workers)] = fps
                if best is None or fps > sweeps[size][name][setting(*best)]:
                    best = (batch, workers)
            if best is None:
                continue
            print(
                f"    decode sweep, {name} CUDA node path: "
                + ", ".join(f"{k} {v:.0f}" for k, v in sweeps[size][name].items())
                + " fps"
            )
            for kind, what in (("engine", "engine alone"), ("node", "node path")):
                label = f"{name}, CUDA, decode {what} ({setting(*best)})"
                rows.append(Contender(label, "cuda", name, kind, best[0], best[1], n))
        results, failed = interleaved(rows, rounds, bench.measure, PIL_LABEL, lambda: pil_fps(bench.pil, frames))
        base = statistics.median(results[PIL_LABEL])
        figures[size] = {label: statistics.median(values) for label, values in results.items()}
        for label, fps in figures[size].items():
            print(f"    {label:<84} {fps:8.1f} fps  {fps / base:6.2f}x PIL")
        for label, why in failed.items():
            print(f"    {label:<84}   failed: {why}")
        for c in [None, *rows]:
            label = PIL_LABEL if c is None else c.label
            fps = figures[size].get(label)
            table.append(
                {
                    "size": size,
                    "label": label,
                    "engine": "PIL" if c is None else c.engine,
                    "device": "cpu" if c is None else c.device,
                    "kind": "baseline" if c is None else c.kind,
                    "batch": 1 if c is None else c.batch,
                    "workers": 1 if c is None else c.workers,
                    "fps": fps,
                    "ratio": None if fps is None else fps / base,
                    "error": failed.get(label),
                }
            )
        if size == "4k":
            here = _goals_4k(rows, figures[size], cuda, goal)
            print_goals([g for g in here if g["met"] is not None])
            for g in here:
                if g["met"] is None:
                    print(f"  not measured  {g['name']} ({g['detail']})")
            goals += here
    if "4k" not in sizes:
        goals += _goals_4k([], {}, cuda, goal, why="4k not in --sizes")
        for g in goals:
            print(f"  not measured  {g['name']} ({g['detail']})")
    return {"fps": figures, "rows": table, "gpu_sweep_fps": sweeps, "goals": goals}


def _goals_4k(rows: list[Contender], fps: dict[str, float], cuda, goal, why: str | None = None) -> list[dict]:
    title_share = f"4K GPU decode node path, best engine: >= {GOAL_OF_ENGINE:.0%} of that engine alone"
    title_cpu = f"4K GPU decode node path, best engine: >= {GOAL_GPU_OVER_CPU}x the best CPU decode node path"
    target_share, target_cpu = f">= {GOAL_OF_ENGINE:g}", f">= {GOAL_GPU_OVER_CPU:g}"

    def best(device: str, kind: str) -> Contender | None:
        measured = [c for c in rows if c.device == device and c.kind == kind and c.label in fps]
        return max(measured, key=lambda c: fps[c.label], default=None)

    node = best("cuda", "node")
    if node is None:
        why = why or ("no CUDA on this machine" if cuda is None else "no CUDA decode engine measured")
        return [_not_measured(title_share, target_share, why), _not_measured(title_cpu, target_cpu, why)]
    alone = next((c for c in rows if c.device == "cuda" and c.kind == "engine" and c.engine == node.engine), None)
    out = []
    if alone is not None and alone.label in fps:
        share = fps[node.label] / fps[alone.label]
        out.append(
            goal(
                title_share,
                share,
                ">=",
                GOAL_OF_ENGINE,
                "x",
                f"{node.engine}: {fps[node.label]:.0f} vs {fps[alone.label]:.0f} fps, "
                f"{setting(node.batch, node.workers)}",
            )
        )
    else:
        out.append(_not_measured(title_share, target_share, f"{node.engine}'s engine alone failed"))
    cpu = best("cpu", "node")
    if cpu is not None:
        out.append(
            goal(
                title_cpu,
                fps[node.label] / fps[cpu.label],
                ">=",
                GOAL_GPU_OVER_CPU,
                "x",
                f"{node.engine} {fps[node.label]:.0f} fps vs {cpu.engine} on {cpu.workers} CPU workers "
                f"{fps[cpu.label]:.0f} fps",
            )
        )
    else:
        out.append(_not_measured(title_cpu, target_cpu, "no CPU decode node path figure in this run"))
    return out


def _not_measured(name: str, target: str, why: str) -> dict:
    return {"name": name, "measured": None, "target": target, "unit": "x", "met": None, "detail": why}


__all__ = ["ENGINES", "measure"]
