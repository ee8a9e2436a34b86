"""What refusing a hostile input costs a node (issue 31), against handling a good one, measured in
the same run: the JPEG decoder's check and decode of each hostile JPEG (`make fuzz-nodes`'
categories, plus the campaign's ~1 MB progressive JPEG declaring 8192x8192 with one scan
repeated), the tensor receiver's handling of each hostile message, and a producer's handling of
each hostile ack. The node's own per-message code runs in this process, without dora (dora's
part is the same for a good and a bad message). Goal: the worst refusal under 100 ms, so good
frames behind a hostile one wait no longer than that.

    python bench/refusal_cost.py [--reps 9] [--json PATH (default out/bench/refusal_cost.json)]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tools/: the hostile inputs' one home

import torch  # noqa: E402
from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save  # noqa: E402

from tensor_codec_nodes.common import protocol as P  # noqa: E402
from tensor_codec_nodes.common.delivery import AckWindow, Outbox  # noqa: E402
from tensor_codec_nodes.common.jpeg_engines import choose_decoder  # noqa: E402
from tensor_codec_nodes.jpeg_decoder.decoder import JpegDecoder  # noqa: E402
from tensor_codec_nodes.jpeg_decoder.engines import make_decode_engine  # noqa: E402
from tensor_codec_nodes.tensor_receiver.receiver import Receiver  # noqa: E402
from tools.fuzz_nodes import forge, schedule  # noqa: E402

BASELINE = "the same node code handling a good message of the same kind"
GOAL_SECONDS = 0.100
CPU = torch.device("cpu")
MIB = 1 << 20


def _median_seconds(fn, reps: int) -> float:
    fn()  # warm: caches, lazy imports
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def _quiet(*names: str):
    """Those loggers silent while measuring, as they were afterwards (the smoke test runs this
    script in the test session's own process)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _event(input_id: str, value, metadata: dict) -> dict:
    return {"type": "INPUT", "id": input_id, "value": value, "metadata": dict(metadata)}


def campaign_jpeg() -> tuple:
    """About 1 MB: a small progressive JPEG's last scan repeated, its header declaring
    8192x8192 (the campaign's 873 KB one stalled the decoder for 26-30 s)."""
    small = forge._pil_jpeg(96, 128, True)
    scan = len(small) - small.rindex(b"\xff\xda") - 2
    data = forge._with_size(forge._repeat_last_scan(small, MIB // scan), 8192, 8192)
    return forge._bytes(data), {P.ENCODING: "jpeg", P.FRAME: "campaign"}


# -- the decoder ---------------------------------------------------------------------------------


def decoder_rows(reps: int) -> list[dict]:
    choice = choose_decoder("auto", CPU)
    decoder = JpegDecoder(make_decode_engine(choice, CPU), max_frame_bytes=56 * MIB)

    def handle(value, metadata):
        checked = decoder.check(_event("jpeg", value, metadata))
        return decoder.decode([checked]) if checked is not None else []

    good = forge.good_jpeg(1, 2, 1)
    cases = [("a ~1 MB progressive JPEG declaring 8192x8192, one scan repeated", campaign_jpeg())]
    for n, category in enumerate(schedule.DECODER_CATEGORIES):
        cases.append((category.name, forge.forge_jpeg(schedule.Item(n, category), 1, 0)))
    return _rows("tc-jpeg-decoder", "JPEG checked and decoded", handle, good, cases, reps, lambda out: not out)


# -- the receiver --------------------------------------------------------------------------------


def receiver_rows(reps: int) -> list[dict]:
    receiver = Receiver(CPU, "full", inputs=["tensors"])
    count = 1_000_000
    for seq in range(8):
        receiver.handle(_event("tensors", *forge.good_tensor(seq, count)))
    seqs = iter(range(8, count))

    def handle_good():
        return receiver.handle(_event("tensors", *forge.good_tensor(next(seqs), count)))

    good_cost = _median_seconds(handle_good, reps)
    rows = []
    for n, category in enumerate(schedule.RECEIVER_CATEGORIES):
        value, metadata = forge.forge_tensor(schedule.Item(n, category), 8, count, 0)
        verdicts = []
        cost = _median_seconds(lambda: verdicts.append(receiver.handle(_event("tensors", value, metadata))), reps)
        rows.append(_row("tc-tensor-receiver", category.name, cost, good_cost, verdicts[-1] != "good"))
    return rows


# -- acks into a producer ------------------------------------------------------------------------


def ack_rows(reps: int) -> list[dict]:
    box = Outbox(
        AckWindow(reliable=True, window=64), lambda obj, md: None, logging.getLogger("refusal-cost"), time.monotonic
    )
    stream = "producer"
    for seq in range(64):
        box.send(seq, {P.STREAM: stream, P.SEQ: seq})
    ctx = forge.AckContext(stream, 64, {0: 1})

    def handle(value, metadata):
        before = (box.refusals.total, box.window.stray_acks)
        box.on_ack(_event("ack", value, metadata))
        return (box.refusals.total, box.window.stray_acks) != before

    good_seqs = iter(range(64))
    good_cost = _median_seconds(
        lambda: box.on_ack(_event("ack", forge.EMPTY, {P.SEQ: next(good_seqs), P.STREAM: stream})), min(reps, 50)
    )
    rows = []
    for n, category in enumerate(schedule.ACK_CATEGORIES):
        value, metadata = forge.forge_ack(schedule.Item(n, category), ctx, 0)
        refused = []
        cost = _median_seconds(lambda: refused.append(handle(value, metadata)), reps)
        rows.append(_row("an acknowledged output (Outbox)", category.name, cost, good_cost, refused[-1]))
    return rows


# -- rows ----------------------------------------------------------------------------------------


def _row(node: str, case: str, seconds: float, good_seconds: float, refused: bool) -> dict:
    return {
        "node": node,
        "case": case,
        "seconds": seconds,
        "good_seconds": good_seconds,
        "ratio": seconds / good_seconds if good_seconds else None,
        "refused": bool(refused),
    }


def _rows(node, what, handle, good, cases, reps, refused_if) -> list[dict]:
    good_cost = _median_seconds(lambda: handle(*good), reps)
    rows = []
    for name, (value, metadata) in cases:
        outcome = []
        cost = _median_seconds(lambda: outcome.append(handle(value, metadata)), reps)
        rows.append(_row(node, name, cost, good_cost, refused_if(outcome[-1])))
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--reps", type=int, default=9, help="timed handlings of each case, the median counts (default 9)"
    )
    add_json_option(parser, "refusal_cost")
    args = parser.parse_args(argv)
    with _quiet("jpeg-decoder", "tensor-receiver", "refusal-cost"):  # refusals are the point here
        rows = decoder_rows(args.reps) + receiver_rows(args.reps) + ack_rows(args.reps)
    print(f"refusing hostile inputs: the node's own code, median of {args.reps} (baseline: {BASELINE})")
    node = None
    for r in rows:
        if r["node"] != node:
            node = r["node"]
            print(f"  {node}: a good message {r['good_seconds'] * 1e3:.3f} ms")
        mark = "refused" if r["refused"] else "ACCEPTED"
        print(f"    {r['seconds'] * 1e3:8.3f} ms  {r['ratio']:7.2f}x  {mark:8}  {r['case']}")
    worst = max(rows, key=lambda r: r["seconds"])
    goals = [
        goal(
            "worst refusal",
            worst["seconds"],
            "<",
            GOAL_SECONDS,
            "s",
            f"{worst['seconds'] * 1e3:.2f} ms: {worst['node']}, {worst['case']} (goal < {GOAL_SECONDS * 1e3:g} ms)",
        ),
    ]
    print_goals(goals)
    return save("refusal_cost", BASELINE, {"reps": args.reps, "rows": rows, "worst": worst, "goals": goals}, args.json)


if __name__ == "__main__":
    main()
