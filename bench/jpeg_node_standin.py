"""The JPEG encoder node's path against its engine alone, on a CPU stand-in of a GPU engine (issue 34):
what the node's own loop costs its engine, measured on any machine.

    python bench/jpeg_node_standin.py [--frames 640] [--rounds 5] [--settings 8x2,32x4]
                                      [--per-frame-us 410] [--batch-us 100] [--receive-us 239]

The stand-in does the per-frame work of the H100 run (bench/README.md, "GPU figures") with the
node's real code around it:
  * the engine (a PooledEngine, so the node's real submit, thread pool and `finish`: each JPEG's
    CRC-32 and header read back on its worker): WORKERS threads sharing one GPU, a lock that a
    batch holds for --batch-us plus --per-frame-us a frame (410: torchvision's nvJPEG engine
    alone there, 2,424 4K frames/s); around it what a worker does on the host: a torch call
    per frame before (the frame made contiguous) and after (the copy to the host), and two host
    waits, all releasing the GIL as CUDA calls do. Each JPEG is a real 4K frame's (about 240 KB);
  * the feed: each message costs the main thread --receive-us of Python holding the GIL, with a
    torch call every few microseconds as tc.receive makes (239: CUDA IPC messages alone into
    the node there, 4,183/s), then the real tc.receive of a small host message.
Each setting (BATCH x WORKERS) is measured as the engine alone (submit keeping every worker busy
with full batches: the baseline) and through the node's path (bench/_encoder_path.py: accept ->
dispatch -> collect, as jpeg_fps.py's node path), interleaved over --rounds; the medians count.
Goal: the node path at least 90 % of its engine alone (issue 34), at every setting. Printed with
it: the main thread's time per frame by phase, and the batches the node formed.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import tensor_codec as tc  # noqa: E402
from tensor_codec_nodes.common.pattern import render  # noqa: E402
from tensor_codec_nodes.jpeg_encoder.engines.base import PooledEngine  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _encoder_path import encoder_path, engine_alone  # noqa: E402
from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save  # noqa: E402

QUALITY = 90
GOAL_RATIO = 0.90
BASELINE = "the same stand-in engine alone (submit keeping every worker busy with full batches), in the same rounds"
SYNC_S, COPY_WAIT_S = 50e-6, 30e-6  # a worker's host waits: its stream before the encode, the bytes after it


def real_jpeg() -> torch.Tensor:
    """A 4K frame of the pattern as JPEG bytes (what the stand-in's every JPEG weighs and is read as)."""
    buffer = io.BytesIO()
    Image.fromarray(render(0, 2160, 3840).permute(1, 2, 0).numpy()).save(buffer, format="JPEG", quality=QUALITY)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


class StandInGpuEngine(PooledEngine):
    """WORKERS threads sharing one stand-in GPU (see the module's docstring)."""

    name = "stand-in"

    def __init__(self, workers: int, per_frame_s: float, batch_s: float, jpeg: torch.Tensor):
        super().__init__(torch.device("cpu"), workers, "420")
        self.per_frame_s, self.batch_s, self.jpeg = per_frame_s, batch_s, jpeg
        self.gpu = threading.Lock()
        self.scratch = torch.zeros(4)

    def encode(self, frames):
        for _ in frames:
            self.scratch.add(1)  # the frame made contiguous: a launch, the GIL dropped and taken back
        time.sleep(SYNC_S)
        with self.gpu:
            time.sleep(self.batch_s + self.per_frame_s * len(frames))
        for _ in frames:
            self.scratch.add(1)  # the bytes copied to the host
        time.sleep(COPY_WAIT_S)
        return [self.jpeg.clone() for _ in frames]


def python_work(us: float, scratch: torch.Tensor) -> None:
    """`us` microseconds of Python holding the GIL, dropping it for a torch call now and then."""
    end = time.perf_counter() + us * 1e-6
    k = 0
    while time.perf_counter() < end:
        k += 1
        if k % 20 == 0:
            scratch.add(1)


def feed(n: int, receive_us: float, event: dict):
    scratch = torch.zeros(4)
    for _ in range(n):
        python_work(receive_us, scratch)
        yield event


def parse_settings(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        batch, _, workers = part.partition("x")
        if not (batch.isdigit() and workers.isdigit() and int(batch) > 0 and int(workers) > 0):
            raise argparse.ArgumentTypeError(f"--settings: expected BATCHxWORKERS items like 8x2, got {part!r}")
        out.append((int(batch), int(workers)))
    return out


def main(argv=()):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=640, help="frames per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds, the median counts")
    parser.add_argument("--settings", type=parse_settings, default=parse_settings("8x2,32x4"), help="BATCHxWORKERS,...")
    parser.add_argument("--per-frame-us", type=float, default=410.0, help="GPU time a frame holds the stand-in GPU")
    parser.add_argument("--batch-us", type=float, default=100.0, help="GPU time a batch holds it besides its frames")
    parser.add_argument("--receive-us", type=float, default=239.0, help="main-thread Python per message received")
    add_json_option(parser, "jpeg_node_standin")
    args = parser.parse_args(list(argv))
    if args.frames < 1 or args.rounds < 1:
        parser.error("--frames and --rounds: expected at least 1")

    jpeg = real_jpeg()
    value, metadata = tc.encode(tv_tensors.Image(torch.zeros(3, 56, 64, dtype=torch.uint8)))
    event = {"type": "INPUT", "id": "frames", "value": value, "metadata": metadata}
    print(
        "The encoder node's path against its engine alone, on a CPU stand-in of a GPU engine: "
        f"{args.per_frame_us:g} us a frame + {args.batch_us:g} us a batch on one stand-in GPU, "
        f"{args.receive_us:g} us of Python per message received, JPEGs of {jpeg.numel() / 1024:.0f} KiB; "
        f"median of {args.rounds} rounds"
    )
    rows, goals = [], []
    for batch, workers in args.settings:
        engine = StandInGpuEngine(workers, args.per_frame_us * 1e-6, args.batch_us * 1e-6, jpeg)
        frames = [torch.zeros(3, 8, 8, dtype=torch.uint8)] * batch  # the stand-in reads none of them
        alone, node, timings = [], [], []
        try:
            engine_alone(engine, frames, 2 * batch * workers, batch)  # warm-up: the pool's threads
            for r in range(args.rounds):
                for kind in ("engine", "node") if r % 2 == 0 else ("node", "engine"):
                    if kind == "engine":
                        alone.append(engine_alone(engine, frames, args.frames, batch))
                    else:
                        timing = encoder_path(
                            engine, batch, feed(args.frames, args.receive_us, event), args.frames, QUALITY
                        )
                        node.append(timing.fps)
                        timings.append(timing)
        finally:
            engine.close()
        a, b = statistics.median(alone), statistics.median(node)
        typical = sorted(timings, key=lambda t: t.fps)[len(timings) // 2]
        where = f"batch {batch}, {workers} worker{'s' if workers > 1 else ''}"
        print(f"  {where}: engine alone {a:7.0f} fps, node path {b:7.0f} fps: {b / a:.2f} of its engine")
        print(f"    {typical.describe()}")
        rows.append(
            {
                "batch": batch,
                "workers": workers,
                "engine_fps": a,
                "node_fps": b,
                "ratio": b / a,
                "per_frame_us": typical.per_frame_us(),
                "batches": dict(typical.batches),
            }
        )
        goals.append(
            goal(
                f"stand-in node path >= {GOAL_RATIO:.0%} of its engine ({where})",
                b / a,
                ">=",
                GOAL_RATIO,
                "x",
                f"{b:.0f} vs {a:.0f} fps",
            )
        )
    print_goals(goals)
    result = {
        "per_frame_us": args.per_frame_us,
        "batch_us": args.batch_us,
        "receive_us": args.receive_us,
        "jpeg_bytes": jpeg.numel(),
        "rounds": args.rounds,
        "rows": rows,
        "goals": goals,
    }
    return save("jpeg_node_standin", BASELINE, result, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
