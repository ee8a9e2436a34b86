"""The child side: a process that makes and runs cases, reporting over a pipe.

Started by the runner through a multiprocessing *forkserver* that has this module (torch,
torchvision, pyarrow, tensor_codec) imported already, so a worker that died is replaced in
milliseconds instead of a fresh interpreter's seconds. Nothing on the pipe is pickled by us:
each message is JSON text (tools/fuzz/encoding.py) sent with ``send_bytes``.

Requests (parent -> worker):

* ``{"op": "run", "seed": S, "start": a, "stop": b, "inject": {...}}``: run cases a..b-1
  (``"alone": true``: a suspected hang run again, the only case this worker runs);
* ``{"op": "materialize", "seed": S, "index": i}``: make case i and send it back (for the
  reproducer of a case that crashed or hung a worker);
* ``{"op": "exit"}``.

Reports (worker -> parent): ``ready``; per case ``start`` *before* running it, then ``done``
with the outcome (and, for ``other:*`` outcomes, the case itself and the traceback); ``batch``
at the end of a batch (with the worker's peak RSS); ``case`` for materialize.

`inject` is the harness's own test hook: ``{"abort": [i], "segv": [i], "exit": [i], "hang":
[i], "raise": [i], "stall": [i]}`` makes case i abort the process, dereference NULL, exit
non-zero, sleep forever or raise instead of running, so tests can prove crashes and hangs are
recorded; ``stall`` sleeps forever too, but only beside other cases: run alone, case i runs as
it is (a case held past the timeout by the machine's load, not by itself).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import time
import traceback
import warnings

import torch

import tensor_codec  # noqa: F401  (imported here so the forkserver preloads it)

from . import encoding
from .execute import Outcome, run_case
from .mutators import make_case
from .seeds import build_seeds

__all__ = ["main", "inject_fault"]


def inject_fault(kind: str, index: int) -> None:
    if kind == "abort":
        os.abort()
    if kind == "segv":
        ctypes.string_at(0)  # SIGSEGV
    if kind == "exit":
        os._exit(3)
    if kind in ("hang", "stall"):
        while True:
            time.sleep(60)
    if kind == "raise":
        raise RuntimeError(f"injected failure at case {index}")


def _injected(inject: dict, index: int) -> str | None:
    for kind, indices in inject.items():
        if index in indices:
            return kind
    return None


def _send(conn, message: dict) -> None:
    try:
        text = encoding.dumps(message)
    except (TypeError, ValueError) as e:  # a case the encoding cannot write: say so, keep going
        message = dict(message, case=None, detail=f"{message.get('detail', '')} [case not sent: {e}]")
        text = encoding.dumps(message)
    conn.send_bytes(text.encode("ascii"))


def main(conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    torch.set_num_threads(1)  # workers run side by side; tiny tensors gain nothing from threads
    warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")
    seeds = build_seeds()
    _send(conn, {"ev": "ready", "pid": os.getpid(), "seeds": len(seeds)})
    while True:
        try:
            request = encoding.loads(conn.recv_bytes())
        except EOFError:
            return
        op = request["op"]
        if op == "exit":
            return
        if op == "materialize":
            try:
                case = make_case(seeds, request["seed"], request["index"])
            except Exception:  # noqa: BLE001 - the fuzzer's own bug: the parent records it
                case = None
            _send(conn, {"ev": "case", "i": request["index"], "case": case})
            continue
        seed, inject = request["seed"], request.get("inject") or {}
        for index in range(request["start"], request["stop"]):
            _send(conn, {"ev": "start", "i": index})
            began = time.perf_counter()
            try:
                case = make_case(seeds, seed, index)
            except Exception as e:  # noqa: BLE001 - the fuzzer's own bug, reported as such
                _send(
                    conn,
                    {
                        "ev": "done",
                        "i": index,
                        "o": "other:HarnessError",
                        "m": ["(generation failed)"],
                        "s": None,
                        "t": time.perf_counter() - began,
                        "stage": "generate",
                        "detail": f"{type(e).__name__}: {str(e)[:500]}",
                        "traceback": traceback.format_exc(),
                    },
                )
                continue
            fault = _injected(inject, index)
            if fault == "stall" and request.get("alone"):
                fault = None  # the machine's load, which a case run alone no longer meets
            if fault is not None:
                try:
                    inject_fault(fault, index)
                    result = Outcome("ok")
                except Exception as e:  # noqa: BLE001
                    result = Outcome(f"other:{type(e).__name__}", "decode", str(e), traceback.format_exc())
            else:
                result = run_case(case, index)
            report = {
                "ev": "done",
                "i": index,
                "o": result.outcome,
                "m": case["mutators"],
                "s": case["seed_message"],
                "t": time.perf_counter() - began,
            }
            if result.outcome.startswith("other:"):
                report.update(case=case, stage=result.stage, detail=result.detail, traceback=result.traceback)
            _send(conn, report)
        _send(conn, {"ev": "batch", "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})
