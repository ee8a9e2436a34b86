"""JPEG encoding throughput (issue 5): frames per second at 1080p and 4K, quality 90, for the
encoder node's engines (CPU thread pool; nvJPEG on CUDA when present), batch 1 and batched, and
for the node's whole per-frame path (restore the tensor_codec message, check, encode, collect),
against PIL's encoder measured in the same run.

    python bench/jpeg_fps.py [--frames 24] [--sizes 1080p,4k]

PIL gets its most favourable input: an (H, W, C) uint8 array made beforehand. The engines get
(C, H, W) tensors, what the nodes receive, in both memory orders: `interleaved` (pixel by pixel,
as cameras deliver; the camera node's LAYOUT=interleaved) and `planar` (contiguous CHW), which
the CPU encoder must reorder first. Ratios > 1 mean faster than PIL.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import tensor_codec as tc  # noqa: E402
from tensor_codec_nodes.common.pattern import render  # noqa: E402
from tensor_codec_nodes.jpeg_encoder.encoder import JpegEncoder  # noqa: E402
from tensor_codec_nodes.jpeg_encoder.engines import CpuJpegEngine, CudaJpegEngine  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _goals import goal, print_goals, write_json  # noqa: E402

SIZES = {"1080p": (1080, 1920), "4k": (2160, 3840)}
QUALITY = 90
ROUNDS = 3  # each contender runs ROUNDS times, interleaved; the median counts


def pil_fps(frames_hwc, n):
    start = time.perf_counter()
    for k in range(n):
        buffer = io.BytesIO()
        Image.fromarray(frames_hwc[k % len(frames_hwc)]).save(buffer, format="JPEG", quality=QUALITY)
    return n / (time.perf_counter() - start)


def engine_fps(engine, frames, n, batch):
    """Keep every worker busy with batches of `batch` frames; frames per second overall."""
    start = time.perf_counter()
    inflight, done, k = [], 0, 0
    while done < n:
        while k < n and len(inflight) < engine.workers:
            chunk = [frames[(k + j) % len(frames)] for j in range(min(batch, n - k))]
            inflight.append(engine.submit(chunk))
            k += len(chunk)
        done += len(inflight.pop(0).result())
    return n / (time.perf_counter() - start)


def node_path_fps(engine, events, n, batch):
    """The encoder node's own loop minus dora: accept (restore + check) -> dispatch -> collect."""
    encoder = JpegEncoder(engine, QUALITY, batch)
    start = time.perf_counter()
    out = 0
    for k in range(n):
        while not encoder.can_accept:
            encoder.dispatch()
            out += len(encoder.collect(0.002))
        encoder.accept(events[k % len(events)])
        encoder.dispatch()
        out += len(encoder.collect())
    while encoder.busy:
        encoder.dispatch()
        out += len(encoder.collect(0.002))
    assert out == n and encoder.stats.bad == encoder.stats.failed == 0
    return n / (time.perf_counter() - start)


def contenders(has_cuda, workers):
    """(name, device, batch, workers, kind, layout)"""
    out = [("torchvision CPU, planar, batch 1, 1 worker", "cpu", 1, 1, "engine", "planar"),
           ("torchvision CPU, batch 1, 1 worker", "cpu", 1, 1, "engine", "interleaved"),
           (f"torchvision CPU, batch 4, {workers} workers", "cpu", 4, workers, "engine", "interleaved"),
           (f"node path CPU, planar, batch 4, {workers} workers", "cpu", 4, workers, "node", "planar"),
           (f"node path CPU, batch 4, {workers} workers", "cpu", 4, workers, "node", "interleaved")]
    if has_cuda:
        out += [("nvJPEG, batch 1, 1 worker", "cuda", 1, 1, "engine", "planar"),
                ("nvJPEG, batch 8, 2 workers", "cuda", 8, 2, "engine", "planar"),
                ("nvJPEG, batch 8, 4 workers", "cuda", 8, 4, "engine", "planar"),
                ("node path nvJPEG, batch 8, 4 workers", "cuda", 8, 4, "node", "planar"),
                ("node path nvJPEG, interleaved, batch 8, 4 workers", "cuda", 8, 4, "node", "interleaved")]
    return out


def main(argv=()):
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=24, help="frames per measurement (GPU: x10)")
    parser.add_argument("--sizes", default="1080p,4k")
    parser.add_argument("--json", type=Path, help="also write the figures and goals here")
    args = parser.parse_args(list(argv))
    has_cuda = torch.cuda.is_available()
    workers = max(2, min(4, os.cpu_count() or 2))
    print(f"JPEG encoding at quality {QUALITY}: frames per second (median of {ROUNDS} interleaved rounds), ratio against PIL")
    print(f"  CPU: {os.cpu_count()} cores; GPU: {torch.cuda.get_device_name() if has_cuda else 'none'}")
    figures, goals = {}, []
    for size in args.sizes.split(","):
        h, w = SIZES[size]
        frames = {"planar": [render(i, h, w) for i in range(4)], "interleaved": [render(i, h, w, hwc=True) for i in range(4)]}
        hwc = [f.permute(1, 2, 0).numpy() for f in frames["interleaved"]]
        events = {}
        for layout, group in frames.items():
            events[layout] = []
            for f in group:
                value, meta = tc.encode(tv_tensors.Image(f))
                events[layout].append({"type": "INPUT", "id": "frames", "value": value, "metadata": meta})
        gpu_frames = [f.cuda() for f in frames["planar"]] if has_cuda else []
        results = {"PIL (baseline), 1 thread": []}
        rows = contenders(has_cuda, workers)
        engines = {}
        for name, device, batch, nworkers, kind, layout in rows:
            if (device, nworkers) not in engines:
                engines[(device, nworkers)] = CpuJpegEngine(QUALITY, nworkers) if device == "cpu" else CudaJpegEngine(torch.device("cuda"), QUALITY, nworkers)
            results[name] = []
        for eng in engines.values():  # warm up: thread pools, nvJPEG state
            engine_fps(eng, gpu_frames if eng.device.type == "cuda" else frames["planar"], 2 * eng.workers, 1)
        for _ in range(ROUNDS):
            results["PIL (baseline), 1 thread"].append(pil_fps(hwc, args.frames))
            for name, device, batch, nworkers, kind, layout in rows:
                n = args.frames * (10 if device == "cuda" else 1)
                engine = engines[(device, nworkers)]
                if kind == "engine":
                    results[name].append(engine_fps(engine, gpu_frames if device == "cuda" else frames[layout], n, batch))
                else:
                    results[name].append(node_path_fps(engine, events[layout], n, batch))
        for eng in engines.values():
            eng.close()
        base = statistics.median(results["PIL (baseline), 1 thread"])
        print(f"\n  {size} ({w}x{h})")
        figures[size] = {}
        for name, values in results.items():
            fps = statistics.median(values)
            figures[size][name] = fps
            print(f"    {name:<52} {fps:8.1f} fps   {fps / base:5.2f}x PIL")
        if has_cuda:
            cpu_best = max(statistics.median(v) for k, v in results.items() if "CPU" in k)
            gpu_node = statistics.median(results["node path nvJPEG, batch 8, 4 workers"])
            here = [goal(f"{size} JPEG: the node path on the GPU at least 10x the best CPU path of this host", gpu_node / cpu_best,
                         ">=", 10, "x", f"{gpu_node:.0f} fps vs {cpu_best:.0f} fps")]
            if size == "4k":
                here.append(goal("4K JPEG frames per second, node path on the GPU (batch 8, 4 workers)", gpu_node, ">=", 300, "fps",
                                 f"{gpu_node:.0f} fps"))
            print_goals(here)
            goals += here
    write_json(args.json, {"fps": figures, "goals": goals})
    return {"fps": figures, "goals": goals}


if __name__ == "__main__":
    main(sys.argv[1:])
