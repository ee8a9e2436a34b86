"""Work in, results out in input order, a pool of workers kept busy: how the JPEG encoder and
decoder nodes form batches (issue 34).

The node's main thread, which calls add, dispatch and done, is also the one that receives every
message, so nothing a worker needs may wait for it:
  * a worker with nothing to do gets whatever is pending, up to BATCH items, at once: an item is
    never held back to fill a batch while a worker idles (latency);
  * while every worker is busy, each full batch is queued behind them (at most one per worker):
    a worker that finishes starts the next batch itself, without waiting for the main thread to
    come back from receiving, and under load every batch is full;
  * `done` hands out new work as soon as it finds a finished batch, before the caller's
    bookkeeping of that batch.
Items held (pending, queued and being worked on) stay under 2 x BATCH x WORKERS, the bound
`can_accept` keeps; past it, messages wait in dora's input queue instead of the node's memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["BatchedWork", "Job", "OrderedBatches"]


@dataclass
class Job(Generic[T]):
    items: list[T]
    future: Future  # of the batch's results; a submit that raised is a future with that exception


class OrderedBatches(Generic[T]):
    """`submit(items) -> Future` starts one batch on a worker (see the module's docstring)."""

    def __init__(self, submit: Callable[[list[T]], Future], batch: int, workers: int):
        self.submit = submit
        self.batch = batch
        self.workers = workers
        self.pending: deque[T] = deque()
        self.inflight: deque[Job[T]] = deque()
        self.held = 0  # items added and not yet handed back by `done`
        self.limit = 2 * batch * workers

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.inflight)

    @property
    def can_accept(self) -> bool:
        """False while the items held reach 2 x BATCH x WORKERS: a round of batches being worked
        on and one waiting."""
        return self.held < self.limit

    def add(self, item: T) -> None:
        self.pending.append(item)
        self.held += 1

    def dispatch(self) -> None:
        """Hand pending items to the workers: up to BATCH to a worker with nothing to do, full
        batches queued behind busy ones (one per worker)."""
        while self.pending:
            started = sum(1 for job in self.inflight if not job.future.done())  # running or queued
            if started < self.workers:
                take = min(self.batch, len(self.pending))
            elif started < 2 * self.workers and len(self.pending) >= self.batch:
                take = self.batch
            else:
                return
            items = [self.pending.popleft() for _ in range(take)]
            try:
                future = self.submit(items)
            except Exception as e:  # handed back by `done` like a batch that failed on its worker
                future = Future()
                future.set_exception(e)
            self.inflight.append(Job(items, future))

    def done(self, timeout: float = 0.0) -> list[Job[T]]:
        """The finished batches at the head of the queue, in input order (later ones that finished
        first wait for those before them); waits up to `timeout` seconds for the oldest if none
        is finished. New work is handed out before they are returned."""
        finished: list[Job[T]] = []
        while self.inflight:
            job = self.inflight[0]
            if not job.future.done():
                if timeout <= 0 or finished:
                    break
                wait([job.future], timeout)
                timeout = 0
                continue
            finished.append(self.inflight.popleft())
        if finished:
            self.held -= sum(len(job.items) for job in finished)
            self.dispatch()
        return finished


class BatchedWork:
    """What a node's work (the JPEG encoder, the decoder) exposes of its `batches` to the node loop."""

    batches: OrderedBatches

    @property
    def busy(self) -> bool:
        return self.batches.busy

    @property
    def held(self) -> int:
        """Items accepted and not yet collected: pending, queued or being worked on."""
        return self.batches.held

    @property
    def can_accept(self) -> bool:
        """False while the items held reach 2 x BATCH x WORKERS; then dora's input queue holds (and,
        at its queue_size, drops the oldest of) further messages instead of the node's memory."""
        return self.batches.can_accept

    def dispatch(self) -> None:
        """Hand pending items to the workers."""
        self.batches.dispatch()
