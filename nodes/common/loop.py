"""The one event loop every tc-* node runs on, and what is around it: settings, joining the
dataflow, dora's event kinds, ending, flushing CUDA IPC and the exit status, each in one place.

A node is a `NodeLogic` subclass (its node.py): its own logic in hooks, each with a default.
Its console script (main.py) is `console_main(SPEC, __package__)`: `--help` and `--version`
answered from the spec and the installed packages' metadata alone, before torch, dora or
tensor_codec is imported; else node.py's `main()`, which is `run(Logic)`:

1. settings: `Logic.load_config(os.environ)`, then DEVICE when the node has it; a bad one is
   logged and the node exits with status 2 (EXIT_BAD_CONFIG) before joining dora.
2. `Logic(config, device, log)`: what the node prepares before it joins (a source opened,
   payloads made, libraries imported: dora starts the flow once every node has joined, so what
   is slow belongs here). SettingError or CannotStart: logged, status 2.
3. join the dataflow (`startup.join_dataflow`: not started by dora -> status 2; first
   `startup.preflight` on what the daemon handed the process: an env name close to a setting, an
   input the node does not read or a required one not wired -> status 2 without joining, so dora
   does not start the dataflow; what only looks wrong is a warning) gives the node's one `Link`
   (tensor_codec.dora: what dora says about the node, read once, and an Output per port); then
   `logic.start(link)`: what needs dora (outputs, acks, an engine; CannotStart: 2).
4. the loop, until the node is finished (below).
5. `logic.close()` and `link.close()` (`Link.of` forgets the node: its Node leaves the dataflow
   once freed); when the node sends with an Output's `send` (`SENDS_WITH_TC`), CUDA IPC is flushed
   (`runtime.finish_sharing`: GPU memory shared with receivers dies with this process); then
   `logic.finish()`, its summary, -> the exit status (0, or 1: EXIT_FAILED).

The loop, one round at a time:

- read: while `more_events()`, the first event as `wait()` says (None: block until one comes;
  seconds: at most that long; 0: only one already queued), then those already queued. A wait of
  at most NAP_S is a nap (sleep, then what is queued): dora 1.1 builds an error with a backtrace
  for each `next(timeout=...)` that runs out (about 5 ms), so a source pacing frames never
  waits in dora. A wait that ran out ends the reading.
- dispatch each event: INPUT -> `on_input(event)`; INPUT_CLOSED -> `on_input_closed(id)`
  (default: noted); STOP -> `on_stop()` (default: nothing: the stream runs out, as dora delivers
  STOP before inputs still queued); ERROR -> logged (the first MAX_ERRORS_LOGGED), counted, the
  loop goes on. No reference to an event outlives its dispatch (its buffer goes back to dora).
  Every input is hostile: an exception out of a node's handling of one event is a refused input
  (`NodeLogic.refusals`: counted, logged rate-limited, the first of each kind with its traceback),
  never the end of the node; but it is a bug of the node (a bad input must be refused by the
  node's own checks), so the node then exits with EXIT_FAILED. At most MAX_EVENTS_PER_ROUND
  events are read before `work()` runs: a sender flooding one input (forged acks, 437,882 of
  them in one campaign) must not starve the node's own work; the next round then reads without
  waiting.
- `work()`.
- `finished()` (the node is done although events may still come: everything sent was
  acknowledged, a consumer went away): what is already queued is dispatched first (dora hands
  out INPUT_CLOSED before the inputs still queued behind it), and if the node is still finished,
  the loop ends.
- input over: the event stream ended, or every declared input closed (and what was queued was
  dispatched): `on_input_over()`, no more reading, `work()` while `busy()`, then the loop ends.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from .hostile import Refusals
from .settings import SettingError

if TYPE_CHECKING:  # tensor_codec loads torch: `--help` answers before it (console_main)
    from tensor_codec.dora import Link

__all__ = [
    "NodeLogic",
    "CannotStart",
    "EventLoop",
    "run",
    "console_main",
    "NODE_PROCESS_DEFAULTS",
    "node_process_defaults",
    "is_timeout",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_BAD_CONFIG",
]

EXIT_OK = 0
EXIT_FAILED = 1  # the run did not do all it should: messages not delivered, sends that kept failing, a receiver's FAIL
# never ran: a bad or misspelt setting, a miswired input, a source or engine that cannot start, not started by dora
EXIT_BAD_CONFIG = 2

NAP_S = 0.002  # waits up to this long sleep instead of waiting in dora (see the module's docstring)
MAX_ERRORS_LOGGED = 20  # dora's ERROR events logged one by one; the rest only counted
# Events read in one round before `work()`: enough to take a burst in one go, few enough that a
# flood of one input (each event costs dora's conversion, tens of microseconds) leaves the node's
# own work most of its time. A node that is `finished()` reads at most QUEUED_BOUND more before
# it ends: a sender that never stops must not keep it alive. (Once every input closed, what is
# queued is read to the end: every sender is gone, so it is finite, and dora hands out
# INPUT_CLOSED before the messages still queued behind it.)
MAX_EVENTS_PER_ROUND = 16
QUEUED_BOUND = 4096


class CannotStart(Exception):
    """The node cannot run (a source that does not open, no JPEG engine): logged (unless the
    message is empty: said already), and the node exits with status 2."""


def is_timeout(event: dict) -> bool:
    """dora 1.1 reports `node.next(timeout=...)` running out as an ERROR event."""
    return event.get("type") == "ERROR" and str(event.get("error", "")).startswith("Timeout event stream error")


class NodeLogic:
    """A node's own logic: the hooks the loop calls, each with a default (a sink that blocks for
    each event and has nothing else to do needs only `on_input` and `finish`)."""

    spec: Any  # the node's NodeSpec (config.py's SPEC): its name, for the logs and for joining
    load_config: Any  # staticmethod: env -> the node's config (config.py)
    SENDS_WITH_TC = False  # True: the node sends with an Output's `send`, so CUDA IPC is flushed before it exits

    def __init__(self, config: Any, device: Any, log: logging.Logger):
        self.config = config
        self.device = device
        self.log = log
        self.refusals = Refusals(log)  # inputs refused (see hostile.py); summarised when the node ends

    def start(self, link: Link) -> None:
        """Joined: set up what needs dora, through `link` (its declared inputs and outputs, their
        queues, `link.output(name)` to send on)."""

    # -- reading ------------------------------------------------------------------------------
    def wait(self) -> float | None:
        """How long the round's first read may wait: None = until an event comes, seconds, 0 = not."""
        return None

    def more_events(self) -> bool:
        """Whether to read (another) event before `work()`; False keeps the rest in dora's queue."""
        return True

    # -- events -------------------------------------------------------------------------------
    def on_input(self, event: dict) -> None:
        """An INPUT event: a message on one of the node's inputs (acks included)."""

    def on_input_closed(self, input_id: str) -> None:
        """That input's sender is gone (the loop notes it; once every input closed, input is over)."""

    def on_stop(self) -> None:
        """dora asks the node to stop. Default: nothing, the event stream runs out (dora delivers
        STOP before inputs still queued: ending now would lose them)."""

    def on_input_over(self) -> None:
        """No more events will come (the stream ended, or every input closed)."""

    # -- work and ending ----------------------------------------------------------------------
    def work(self) -> None:
        """Once per round, after the events read: the node's own work (send, encode, report)."""

    def finished(self) -> bool:
        """Done now, although events may still come."""
        return False

    def busy(self) -> bool:
        """Work left once input is over (frames still being encoded)."""
        return False

    def close(self) -> None:
        """Release what the node holds (a source, worker threads); also after an exception."""

    def finish(self) -> int:
        """The end report -> the exit status (EXIT_OK or EXIT_FAILED)."""
        return EXIT_OK


class EventLoop:
    """Runs one `NodeLogic` on a node's Link (a dora node's, or a test double's with
    next/try_recv/node_config)."""

    def __init__(self, link: Link, logic: NodeLogic, log: logging.Logger):
        self.node = link.node  # events are read from it directly: the hot path
        self.logic = logic
        self.log = log
        self.inputs = link.declared_inputs()
        self.closed: set[str] = set()
        self.over = False
        self.errors = 0
        self.cut = False  # the last read stopped at MAX_EVENTS_PER_ROUND: more are queued

    def run(self) -> None:
        logic = self.logic
        while True:
            if not self.over:
                self._read()
                if not self.over and self.inputs and self.inputs <= self.closed:
                    self._dispatch_queued(None)
                    self._input_over()
            logic.work()
            if logic.finished():
                if self.over:
                    break
                self._dispatch_queued(QUEUED_BOUND)
                if logic.finished():
                    break
            elif self.over and not logic.busy():
                break
        if self.errors > MAX_ERRORS_LOGGED:
            self.log.error("dora reported %d errors in all (the first %d logged)", self.errors, MAX_ERRORS_LOGGED)

    def _read(self) -> None:
        if not self.logic.more_events():
            return
        event = self._first(0 if self.cut else self.logic.wait())
        self.cut = False
        read = 0
        while event is not None:
            if is_timeout(event):
                return
            self._dispatch(event)
            event = None
            read += 1
            if read >= MAX_EVENTS_PER_ROUND:
                self.cut = True
                return
            if self.over or not self.logic.more_events():
                return
            event = self.node.try_recv()

    def _first(self, wait: float | None) -> dict | None:
        if wait is not None and wait <= NAP_S:
            if wait > 0:
                time.sleep(wait)
            return self.node.try_recv()  # None: nothing queued (not the end of the stream)
        event = self.node.next() if wait is None else self.node.next(timeout=wait)
        if event is None:
            self._input_over()
        return event

    def _dispatch_queued(self, bound: int | None) -> None:
        """Dispatch what is queued, without blocking: all of it, or at most `bound` events."""
        read = 0
        while bound is None or read < bound:
            event = self.node.try_recv()
            if event is None:
                return
            if not is_timeout(event):
                self._dispatch(event)
            event = None
            read += 1

    def _dispatch(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "INPUT":
            try:
                self.logic.on_input(event)
            except Exception as e:  # one hostile input must not end the node: refused, counted
                self.logic.refusals.raised(f"{str(event.get('id'))[:64]}: {type(e).__name__}", e)
        elif kind == "INPUT_CLOSED":
            input_id = str(event.get("id", ""))  # dora's own event: an input's id
            self.closed.add(input_id)
            self.log.debug("input %s closed", input_id)
            self.logic.on_input_closed(input_id)
        elif kind == "STOP":
            self.logic.on_stop()
        elif kind == "ERROR":
            self.errors += 1
            if self.errors <= MAX_ERRORS_LOGGED:
                self.log.error("dora reported: %s", str(event.get("error"))[:500])

    def _input_over(self) -> None:
        if not self.over:
            self.over = True
            self.logic.on_input_over()


def run(logic_class: type[NodeLogic]) -> int:
    """A node's main(): settings, joining, the loop, flushing, the exit status (module docstring)."""
    from .runtime import finish_sharing, settle_pacing, setup_logging
    from .startup import join_dataflow

    spec = logic_class.spec
    log = setup_logging(spec.name.removeprefix("tc-"))
    try:
        config = logic_class.load_config(os.environ)
        device = None
        if hasattr(config, "device"):
            from .device import resolve_device

            device = resolve_device(config.device)
        logic = logic_class(config, device, log)
    except (SettingError, CannotStart) as e:
        _said(log, e)
        return EXIT_BAD_CONFIG
    link = None
    try:
        link = join_dataflow(spec, log)
        if link is None:
            return EXIT_BAD_CONFIG
        try:
            logic.start(link)
        except CannotStart as e:
            _said(log, e)
            return EXIT_BAD_CONFIG
        EventLoop(link, logic, log).run()
    finally:
        logic.close()
        if link is not None:
            link.close()  # the loop is done with the Node: it leaves the dataflow once freed
    if logic.SENDS_WITH_TC:
        finish_sharing(log)
    settle_pacing(log)
    status = logic.finish()
    refusals = logic.refusals
    if refusals.total:  # with what the node's memory peaked at: what the bad inputs cost it at most
        log.warning("%s; peak RSS %.0f MB", refusals.summary(), _peak_rss_mb())
    if refusals.unexpected:
        log.error(
            "%d inputs raised an exception in the node's own code (a bug: a bad input is to be refused by the "
            "node's checks; the first traceback of each kind is above): exiting with status %d",
            refusals.unexpected,
            EXIT_FAILED,
        )
        status = EXIT_FAILED
    return status


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


# Environment defaults of a node process. Idle OpenMP workers of torch spin-wait by default; a
# dora pipeline runs several such processes side by side, and the spinning of one steals the cores
# the others need: measured on 2 cores, a 1080p camera at 60 fps missed deadlines and its receiver
# burnt ~6 ms of CPU per frame just spinning (bench/README.md, camera_fps). Passive waiting keeps
# the thread pool for big copies without that. OpenMP reads it once, when torch loads, so it is set
# here, before the node (and torch) is imported; an explicit setting in the dataflow's env wins.
# Here and not on importing the package: a library import must not change its importer's process.
NODE_PROCESS_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


def node_process_defaults(environ: MutableMapping[str, str]) -> None:
    """Set NODE_PROCESS_DEFAULTS in `environ` (os.environ) where it does not say otherwise."""
    for name, value in NODE_PROCESS_DEFAULTS.items():
        environ.setdefault(name, value)


def console_main(spec: Any, package: str) -> int:
    """A node's console script: `--help`, `--version` (and a stray argument) answered from `spec`
    and package metadata alone, instantly and without a dora daemon; else the node itself
    (`package`.node: torch, dora, tensor_codec), in a process with NODE_PROCESS_DEFAULTS set
    first."""
    from .startup import answer_command_line

    node_process_defaults(os.environ)
    answered = answer_command_line(spec)
    if answered is not None:
        return answered
    return importlib.import_module(f"{package}.node").main()


def _said(log: logging.Logger, e: Exception) -> None:
    if str(e):
        log.error("%s", e)
