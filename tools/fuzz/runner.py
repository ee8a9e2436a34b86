"""The parent side: hand out batches of case indices to worker processes, watch each case with a
timeout, record crashes, hangs and unexpected exceptions with a reproducer, count outcomes.

A worker reports the index of each case before running it. If the worker process dies (a
signal, a non-zero exit) the case it was running is a ``crash``; if a case runs past the
per-case timeout the worker is killed and the case is a suspected hang. Either way a fresh
worker (forked from the forkserver: milliseconds) makes that case again without running it, the
reproducer is written, and the rest of the batch goes on in the new worker. ``other:*``
outcomes come back with the case and its traceback and are written the same way.

A suspected hang is not a ``hang`` yet: the load of the machine alone (the other workers, other
work) can hold a case past the timeout (two "hangs" of a run replayed as DecodeError in 7 to
41 ms). Once every batch is done, each is run again alone, in a fresh worker with nothing else
in it and a longer timeout (``alone_timeout``): a ``hang`` only if it runs past that too,
otherwise counted as what it then ends in.

The parent never imports torch or tensor_codec: it only schedules, so it cannot be taken down
by what it watches.
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import encoding

__all__ = ["Config", "Summary", "run", "EXPECTED", "REPRO_FORMAT", "write_reproducer", "load_reproducer"]

EXPECTED = ("ok", "DecodeError")
REPRO_FORMAT = "tc-fuzz-reproducer/1"
READY_TIMEOUT_S = 300.0  # a worker's start: a fresh interpreter imports torch when preloading failed
MATERIALIZE_TIMEOUT_S = 60.0


@dataclass
class Config:
    cases: int = 100_000
    seed: int = 0
    start: int = 0  # first case index (a run covers start .. start + cases - 1)
    workers: int = 0  # 0: os.cpu_count()
    timeout: float = 5.0  # seconds per case
    out: Path = Path("out/fuzz")
    batch: int = 200
    max_reproducers: int = 50  # per outcome; the rest are counted, not written
    inject: dict = field(default_factory=dict)  # harness self-test hooks (see worker.py)
    progress: bool = True
    alone_timeout: float | None = None  # seconds a suspected hang may run alone; None: 3 x timeout

    @property
    def alone_timeout_s(self) -> float:
        """Seconds a suspected hang may run alone before it is a hang."""
        return self.alone_timeout if self.alone_timeout is not None else 3 * self.timeout


@dataclass
class Suspect:
    """A case that ran past the timeout beside the other workers, to be run again alone."""

    index: int
    case: dict | None  # as made again for its reproducer
    detail: str


@dataclass
class Summary:
    seed: int
    start: int
    cases: int
    workers: int
    timeout_s: float
    alone_timeout_s: float = 0.0
    wall_s: float = 0.0
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    by_mutator: dict = field(default_factory=lambda: collections.defaultdict(collections.Counter))
    by_seed_family: dict = field(default_factory=lambda: collections.defaultdict(collections.Counter))
    reproducers: list = field(default_factory=list)
    worker_restarts: int = 0
    deaths_outside_cases: int = 0  # workers that died with no case running (counted as a failure)
    suspected_hangs: int = 0  # cases past the timeout beside the other workers, run again alone
    hangs_replayed_clean: int = 0  # of them, those that ended alone (counted as what they ended in)
    unexpected_stages: collections.Counter = field(default_factory=collections.Counter)  # (outcome, stage)
    peak_worker_rss_mb: float = 0.0
    slowest: list = field(default_factory=list)  # (seconds, index), the 10 slowest cases
    interrupted: bool = False

    @property
    def done(self) -> int:
        return sum(self.outcomes.values())

    @property
    def ok(self) -> bool:
        return (
            not self.interrupted
            and self.done == self.cases
            and set(self.outcomes) <= set(EXPECTED)
            and not self.deaths_outside_cases
        )

    def as_dict(self) -> dict:
        return {
            "seed": self.seed,
            "start": self.start,
            "cases": self.cases,
            "completed": self.done,
            "workers": self.workers,
            "timeout_s": self.timeout_s,
            "alone_timeout_s": self.alone_timeout_s,
            "wall_s": round(self.wall_s, 2),
            "cases_per_s": round(self.done / self.wall_s, 1) if self.wall_s else None,
            "outcomes": dict(sorted(self.outcomes.items())),
            "by_mutator": {m: dict(sorted(c.items())) for m, c in sorted(self.by_mutator.items())},
            "by_seed_family": {m: dict(sorted(c.items())) for m, c in sorted(self.by_seed_family.items())},
            "reproducers": self.reproducers,
            "worker_restarts": self.worker_restarts,
            "deaths_outside_cases": self.deaths_outside_cases,
            "suspected_hangs": self.suspected_hangs,
            "hangs_replayed_clean": self.hangs_replayed_clean,
            "unexpected_by_stage": [
                {"outcome": o, "stage": st, "cases": n} for (o, st), n in sorted(self.unexpected_stages.items())
            ],
            "peak_worker_rss_mb": round(self.peak_worker_rss_mb, 1),
            "slowest_cases": [{"index": i, "seconds": round(s, 3)} for s, i in sorted(self.slowest, reverse=True)],
            "interrupted": self.interrupted,
            "passed": self.ok,
        }


class _Worker:
    """One worker process and what it is doing."""

    def __init__(self, ctx, number: int):
        self.number = number
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_entry, args=(child,), name=f"tc-fuzz-worker-{number}", daemon=True)
        self.process.start()
        child.close()
        self.batch: tuple[int, int] | None = None  # (start, stop)
        self.current: int | None = None  # the case it said it is running
        self.current_since = 0.0
        self.next_index = 0  # first index of the batch not reported done
        self.ready = False

    def send(self, message: dict) -> None:
        self.conn.send_bytes(encoding.dumps(message).encode("ascii"))

    def recv(self) -> dict:
        return encoding.loads(self.conn.recv_bytes())

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.conn.close()

    def wait_ready(self, timeout: float) -> None:
        if not self.conn.poll(timeout):
            self.kill()
            raise RuntimeError(f"fuzz worker did not start within {timeout:.0f} s")
        try:
            message = self.recv()
        except (EOFError, OSError):
            self.kill()
            raise RuntimeError(
                f"fuzz worker exited while starting ({_exit_text(self.process.exitcode)}); its traceback is above"
            ) from None
        if message.get("ev") != "ready":
            raise RuntimeError(f"fuzz worker: expected 'ready', got {message!r}")
        self.ready = True


def _worker_entry(conn) -> None:
    """The workers' target, named here so the parent never imports torch: the child imports the
    worker module (already loaded in the forkserver it was forked from)."""
    from .worker import main

    main(conn)


def _context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tools.fuzz.worker"])
    return ctx


def write_reproducer(
    out: Path,
    seed: int,
    index: int,
    outcome: str,
    *,
    case: dict | None,
    stage: str = "",
    detail: str = "",
    traceback: str = "",
) -> Path:
    """out/repro-<seed>-<index>.json: everything needed to decode the message again, in JSON."""
    path = out / f"repro-{seed}-{index}.json"
    record = {
        "format": REPRO_FORMAT,
        "seed": seed,
        "index": index,
        "outcome": outcome,
        "stage": stage,
        "detail": detail,
        "traceback": traceback,
        "replay": f"python -m tools.fuzz --replay {path}",
        "seed_message": case["seed_message"] if case else None,
        "mutators": case["mutators"] if case else None,
        "case": {k: case[k] for k in ("metadata", "value", "call")} if case else None,
    }
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(encoding.dumps(record, indent=1))
    os.replace(tmp, path)
    return path


def load_reproducer(path: Path) -> dict:
    record = encoding.loads(Path(path).read_text())
    if record.get("format") != REPRO_FORMAT:
        raise ValueError(f"{path}: expected a {REPRO_FORMAT} file, got format {record.get('format')!r}")
    if record.get("case") is None:
        raise ValueError(
            f"{path}: holds no message (the case could not be made again); regenerate it from seed {record['seed']} "
            f"index {record['index']}"
        )
    return record


class _Run:
    def __init__(self, config: Config):
        self.config = config
        self.workers_wanted = config.workers or os.cpu_count() or 1
        self.summary = Summary(
            config.seed, config.start, config.cases, self.workers_wanted, config.timeout, config.alone_timeout_s
        )
        self.suspects: list[Suspect] = []
        self.queue: collections.deque = collections.deque()
        stop = config.start + config.cases
        for a in range(config.start, stop, config.batch):
            self.queue.append((a, min(a + config.batch, stop)))
        self.ctx = _context()
        self.workers: list[_Worker] = []
        self.written: collections.Counter = collections.Counter()
        self.started = time.monotonic()
        self.last_progress = self.started

    # ---- workers
    def _spawn(self, number: int) -> _Worker:
        w = _Worker(self.ctx, number)
        w.wait_ready(READY_TIMEOUT_S)
        return w

    def _replace(self, w: _Worker) -> _Worker:
        w.kill()
        self.summary.worker_restarts += 1
        fresh = self._spawn(w.number)
        self.workers[self.workers.index(w)] = fresh
        return fresh

    def _assign(self, w: _Worker) -> None:
        if w.batch is not None or not self.queue:
            return
        if not w.process.is_alive():  # died while idle (after its last batch)
            self.summary.deaths_outside_cases += 1
            print(f"fuzz: an idle worker died: {_exit_text(w.process.exitcode)}", file=sys.stderr, flush=True)
            w = self._replace(w)
        self._start_batch(w, *self.queue.popleft())

    def _start_batch(self, w: _Worker, start: int, stop: int, alone: bool = False) -> None:
        """Hand `w` cases start..stop-1 (`alone`: a suspected hang run again, nothing else in `w`)."""
        w.batch, w.next_index, w.current = (start, stop), start, None
        w.current_since = time.monotonic()
        request = {"op": "run", "seed": self.config.seed, "start": start, "stop": stop, "inject": self.config.inject}
        w.send({**request, "alone": True} if alone else request)

    # ---- results
    def _count(self, index: int, outcome: str, mutators: list | None, seed_message: str | None) -> None:
        self.summary.outcomes[outcome] += 1
        names = ["(unknown)"] if mutators is None else (mutators or ["(none: the seed message as it is)"])
        for m in set(names):
            self.summary.by_mutator[m][outcome] += 1
        family = (seed_message or "(unknown)").split("/")[0]
        self.summary.by_seed_family[family][outcome] += 1

    def _record(self, index: int, outcome: str, case: dict | None, stage: str, detail: str, tb: str) -> None:
        self.summary.unexpected_stages[(outcome, stage)] += 1
        if self.written[outcome] >= self.config.max_reproducers:
            return
        self.written[outcome] += 1
        path = write_reproducer(
            self.config.out, self.config.seed, index, outcome, case=case, stage=stage, detail=detail, traceback=tb
        )
        self.summary.reproducers.append({"index": index, "outcome": outcome, "path": str(path), "detail": detail[:300]})
        print(f"fuzz: case {index}: {outcome} ({stage}: {detail[:200]}) -> {path}", file=sys.stderr, flush=True)

    def _handle(self, w: _Worker, message: dict) -> None:
        ev = message["ev"]
        if ev == "start":
            w.current, w.current_since = message["i"], time.monotonic()
        elif ev == "done":
            index, outcome = message["i"], message["o"]
            w.current, w.next_index, w.current_since = None, index + 1, time.monotonic()
            self._count(index, outcome, message["m"], message["s"])
            slow = self.summary.slowest
            slow.append((message["t"], index))
            if len(slow) > 20:
                slow.sort(reverse=True)
                del slow[10:]
            if outcome not in EXPECTED:
                self._record(
                    index,
                    outcome,
                    message.get("case"),
                    message.get("stage", ""),
                    message.get("detail", ""),
                    message.get("traceback", ""),
                )
        elif ev == "batch":
            w.batch, w.current = None, None
            self.summary.peak_worker_rss_mb = max(self.summary.peak_worker_rss_mb, message["rss_kb"] / 1024)

    def _lost(self, w: _Worker, outcome: str, detail: str) -> None:
        """`w` crashed or hung: record its case, replace it, requeue the rest of its batch."""
        start, stop = w.batch if w.batch is not None else (w.next_index, w.next_index)
        if w.current is not None:
            index = w.current
        else:  # it died after one case returned and before the next one started
            index = w.next_index
            detail += " (between cases: the previous case had returned, this one had not started)"
        fresh = self._replace(w)
        if index >= stop:  # every case of the batch had returned: nothing to attribute it to
            self.summary.deaths_outside_cases += 1
            print(
                f"fuzz: a worker died after finishing cases {start}..{stop - 1}: {detail}", file=sys.stderr, flush=True
            )
            return
        case = self._materialize(fresh, index)
        if index + 1 < stop:
            self.queue.appendleft((index + 1, stop))
        if outcome == "hang":  # run again alone once every batch is done (the module's docstring)
            self.suspects.append(Suspect(index, case, detail))
            self.summary.suspected_hangs += 1
            return
        self._count_lost(index, outcome, case, detail)

    def _count_lost(self, index: int, outcome: str, case: dict | None, detail: str) -> None:
        """Count and record a case whose worker died or was killed while running it."""
        self._count(index, outcome, case["mutators"] if case else None, case["seed_message"] if case else None)
        self._record(index, outcome, case, "worker", detail, "")

    def _replay(self, suspect: Suspect) -> None:
        """Run a suspected hang again alone: in a fresh worker with nothing else in it, for up to
        `alone_timeout_s` seconds. Ended: counted as what it ended in (by `_handle`, as any case).
        Past that too: a hang; the worker died: a crash. It leaves `suspects` just before it is
        counted, so a Ctrl-C (which counts those left) never counts it twice."""
        limit = self.config.alone_timeout_s
        w = self._spawn(self.workers_wanted)  # beside the others: not one of them
        try:
            self._start_batch(w, suspect.index, suspect.index + 1, alone=True)
            done = self._await_done(w, limit)
            exitcode = w.process.exitcode  # None: still running (it is killed below)
        finally:
            w.kill()
        self.suspects.remove(suspect)
        if done is not None:
            self.summary.hangs_replayed_clean += 1
            self._handle(w, done)
        elif exitcode is None:
            detail = f"{suspect.detail}; run again alone in a fresh worker, still running after {limit:g} s"
            self._count_lost(suspect.index, "hang", suspect.case, detail)
        else:
            detail = f"{suspect.detail}; run again alone in a fresh worker: {_exit_text(exitcode)}"
            self._count_lost(suspect.index, "crash", suspect.case, detail)

    @staticmethod
    def _await_done(w: _Worker, limit: float) -> dict | None:
        """The `done` report of the one case `w` runs, or None when it did not come within `limit`
        seconds or `w` died first."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            multiprocessing.connection.wait([w.conn, w.process.sentinel], timeout=max(0.0, deadline - time.monotonic()))
            try:
                while w.conn.poll():
                    message = w.recv()
                    if message.get("ev") == "done":
                        return message
            except (EOFError, OSError):
                pass
            if not w.process.is_alive():
                return None
        return None

    def _materialize(self, w: _Worker, index: int) -> dict | None:
        try:
            w.send({"op": "materialize", "seed": self.config.seed, "index": index})
            if w.conn.poll(MATERIALIZE_TIMEOUT_S):
                message = w.recv()
                if message.get("ev") == "case":
                    return message["case"]
        except (EOFError, OSError):
            pass
        # making the case itself crashed or hung the new worker: the reproducer says so
        self._replace(w)
        return None

    # ---- the loop
    def run(self) -> Summary:
        self.workers = [self._spawn(n) for n in range(self.workers_wanted)]
        try:
            while self.queue or any(w.batch is not None for w in self.workers):
                for w in list(self.workers):
                    self._assign(w)
                self._poll()
                self._progress()
            while self.suspects:
                self._replay(self.suspects[0])
        except KeyboardInterrupt:
            self.summary.interrupted = True
            for suspect in self.suspects:  # not run again: counted as what they were seen to be
                self._count_lost(suspect.index, "hang", suspect.case, f"{suspect.detail}; not run again: interrupted")
        finally:
            self.summary.wall_s = time.monotonic() - self.started
            for w in self.workers:
                try:
                    if w.process.is_alive():
                        w.send({"op": "exit"})
                except OSError:
                    pass
            for w in self.workers:
                w.process.join(2)
                w.kill()
        return self.summary

    def _poll(self) -> None:
        busy = [w for w in self.workers if w.batch is not None]
        now = time.monotonic()
        deadlines = [w.current_since + self.config.timeout - now for w in busy]
        wait_s = max(0.0, min(deadlines + [1.0]))
        handles = [w.conn for w in busy] + [w.process.sentinel for w in busy]
        ready = set(multiprocessing.connection.wait(handles, timeout=wait_s)) if handles else set()
        for w in busy:
            if w.conn in ready:
                try:
                    while w.conn.poll():
                        self._handle(w, w.recv())
                except (EOFError, OSError):
                    pass
            if (w.process.sentinel in ready or not w.process.is_alive()) and w.batch is not None:
                w.process.join(5)
                try:  # what it managed to report before dying
                    while w.conn.poll():
                        self._handle(w, w.recv())
                except (EOFError, OSError):
                    pass
                if w.batch is not None:
                    self._lost(w, "crash", _exit_text(w.process.exitcode))
                continue
            if w.batch is not None and time.monotonic() - w.current_since > self.config.timeout:
                self._lost(w, "hang", f"case still running after {self.config.timeout:g} s; worker killed")

    def _progress(self) -> None:
        now = time.monotonic()
        if not self.config.progress or now - self.last_progress < 10:
            return
        self.last_progress = now
        s = self.summary
        rate = s.done / (now - self.started)
        counts = ", ".join(f"{k} {v}" for k, v in sorted(s.outcomes.items()))
        print(f"fuzz: {s.done}/{s.cases} cases, {rate:.0f}/s, {counts}", file=sys.stderr, flush=True)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "worker vanished"
    if code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with status {code}"


def run(config: Config) -> Summary:
    config.out.mkdir(parents=True, exist_ok=True)
    summary = _Run(config).run()
    (config.out / f"summary-{config.seed}.json").write_text(json.dumps(summary.as_dict(), indent=1))
    return summary


def format_summary(summary: Summary, top_mutators: int = 200, max_reproducers: int = Config.max_reproducers) -> str:
    d = summary.as_dict()
    outcomes = sorted(summary.outcomes)
    lines = [
        f"tc fuzz: seed {d['seed']}, cases {d['start']}..{d['start'] + d['cases'] - 1}, {d['completed']} run "
        f"in {d['wall_s']:.1f} s ({d['cases_per_s']} cases/s) on {d['workers']} workers, timeout {d['timeout_s']:g} "
        "s/case",
        "",
        f"{'outcome':<24}{'cases':>9}",
    ]
    for o in outcomes:
        lines.append(f"{o:<24}{summary.outcomes[o]:>9}")
    lines.append(f"{'total':<24}{summary.done:>9}")
    width = max([len(o) for o in outcomes] + [9]) + 2

    def table(title: str, rows: dict) -> list[str]:
        first = max([len(n) for n in rows] + [23]) + 1
        out = [f"{title:<{first}}" + "".join(f"{o:>{width}}" for o in outcomes)]
        for name, counts in sorted(rows.items())[:top_mutators]:
            out.append(f"{name:<{first}}" + "".join(f"{counts.get(o, 0):>{width}}" for o in outcomes))
        return out

    lines += ["", "by mutator (a case counts once under each mutator it applied; fixup: made consistent again)", ""]
    lines += table("mutator", summary.by_mutator)
    lines += ["", "by seed message family", ""]
    lines += table("family", summary.by_seed_family)
    lines.append("")
    lines.append(
        f"worker restarts: {summary.worker_restarts}; peak worker RSS: {d['peak_worker_rss_mb']} MB; slowest cases: "
        + ", ".join(f"#{s['index']} {s['seconds']} s" for s in d["slowest_cases"][:5])
    )
    if summary.suspected_hangs:
        lines.append(
            f"suspected hangs: {summary.suspected_hangs} (past {d['timeout_s']:g} s beside the other workers), "
            f"{summary.hangs_replayed_clean} replayed clean alone (a fresh worker, {d['alone_timeout_s']:g} s "
            "allowed: counted as what they ended in)"
        )
    if summary.unexpected_stages:
        lines += [
            "",
            "unexpected outcomes by where they were raised (decode, touch, keep, release; worker: crash / hang)",
            "",
        ]
        for (outcome, stage), n in sorted(summary.unexpected_stages.items()):
            lines.append(f"  {outcome:<24} {stage:<10} {n:>7}")
    if summary.reproducers:
        lines.append("")
        lines.append(f"reproducers ({len(summary.reproducers)} written, at most {max_reproducers} per outcome):")
        for r in summary.reproducers[:20]:
            lines.append(f"  {r['outcome']:<22} case {r['index']}: {r['path']}")
        if len(summary.reproducers) > 20:
            lines.append(f"  ... and {len(summary.reproducers) - 20} more (summary-{summary.seed}.json lists them all)")
    lines.append("")
    if summary.interrupted:
        lines.append("INTERRUPTED")
    lines.append(
        "PASS: only ok and DecodeError"
        if summary.ok
        else "FAIL: outcomes other than ok / DecodeError (see reproducers)"
    )
    return "\n".join(lines)
