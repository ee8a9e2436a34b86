"""What a CUDA IPC send pays to collect finished messages, against how many are in flight
(issue 30): the producer's ledger `collect`, which every send runs, with 1 to 128 messages held
by a receiver process's claims, against the same call when it takes the lock and looks at every
live slot in full (what it did before, and still does once per `SWEEP_NS`), in the same run.

The ledger is shared memory and record locks, no CUDA: this runs on any machine, and what it
measures is what a GPU host pays too (plus that host's own syscall and Python speed).

    python bench/ipc_collect.py [--in-flight 1,8,32,128] [--batches 15]
                                [--json PATH (default out/bench/ipc_collect.json)]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save  # noqa: E402
from _timing import fmt_us, per_call_seconds  # noqa: E402

from tensor_codec.cuda_ipc.ledger import SWEEP_NS, Ledger, LedgerView  # noqa: E402

BASELINE = "collect looking at every live slot in full at every call (a sweep each time, as before issue 30)"
GOAL_US_PER_HELD = 1.0  # per message in flight, at the largest count


def measure(in_flight: int, batches: int) -> tuple[float, float]:
    """-> (seconds per collect as sends run it, seconds per collect sweeping every time)."""
    ledger = Ledger(slots=max(in_flight, 1) + 8, claim_timeout_s=3600.0)
    view = LedgerView(ledger.name)
    try:
        for i in range(in_flight):
            view.claim(ledger.publish(expected=1, nbytes=1, token=i, output="out"))  # held
        start = time.monotonic_ns()
        ledger.collect(now_ns=start)
        clock = [start]

        def within_sweep() -> None:
            clock[0] += 1  # far less than SWEEP_NS per call: what back-to-back sends see
            ledger.collect(now_ns=clock[0])

        def sweeping() -> None:
            clock[0] += SWEEP_NS
            ledger.collect(now_ns=clock[0])

        batch = max(20, 4000 // max(in_flight, 1))
        fast = per_call_seconds(within_sweep, batch=batch, batches=batches)
        full = per_call_seconds(sweeping, batch=batch, batches=batches)
        assert len(ledger.live) == in_flight, "a held message was collected"
        return fast, full
    finally:
        view.close()
        ledger.close()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--in-flight", default="1,8,32,128", help="messages held, comma separated")
    parser.add_argument("--batches", type=int, default=15, help="timed batches per case, the median counts")
    add_json_option(parser, "ipc_collect")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.in_flight.split(",")]
    if any(n < 0 for n in counts) or args.batches < 1:
        parser.error("--in-flight: counts >= 0; --batches: at least 1")
    print(f"{'in flight':>9s} {'collect':>12s} {'full look':>12s} {'ratio':>6s}")
    rows = []
    for n in counts:
        fast, full = measure(n, args.batches)
        rows.append({"in_flight": n, "collect_us": fast * 1e6, "full_look_us": full * 1e6, "ratio": fast / full})
        print(f"{n:9d} {fmt_us(fast)} {fmt_us(full)} {fast / full:6.2f}")
    top = rows[-1]
    per_held = top["collect_us"] / max(top["in_flight"], 1)
    goals = [
        goal(
            f"collect with {top['in_flight']} messages in flight under {GOAL_US_PER_HELD:g} us per message",
            per_held,
            "<",
            GOAL_US_PER_HELD,
            "us",
            f"{top['collect_us']:.1f} us in all, {per_held:.2f} us per message; "
            f"{top['full_look_us'] / max(top['in_flight'], 1):.2f} us looking at each in full",
        )
    ]
    print_goals(goals)
    return save("ipc_collect", BASELINE, {"rows": rows, "goals": goals}, args.json)


if __name__ == "__main__":
    main()
