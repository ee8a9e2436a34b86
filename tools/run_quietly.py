"""Run a dora command (`make run`: `dora start dataflow.yml --attach`) and pass its output through,
all but the lines dora prints about itself that are known to be harmless.

A passing run must read as passing: a WARN or ERROR line is for what is wrong. dora-rs 1.1's node
API logs the first three large sends of every node at WARN level, each hop of its send path
("output `image`: 1037128 B -> daemon path (dora-rs/dora#2742 diagnostic)"): a trace its
developers added to find where a Windows run hangs (dora-rs/dora#2742), left on in the release.
On this project's default pipeline that is 33 WARN lines out of 118, about nothing. (Now and
then zenoh, which carries dora's messages, adds one as a node ends: a link event for a connection
it already closed; and where a node may not raise a thread's priority, as root in a container,
two about its shared-memory watchdog threads running at normal priority.) It cannot be
turned off from outside: the node API's log filter is `RUST_LOG` *or* its own "info", so a level
set in the environment cannot lower it, and the dataflow's `min_log_level` would also drop the
nodes' own stdout. So the lines are hidden here, counted, and named once at the end;
`TC_DORA_DIAGNOSTICS=1` shows them.

    python tools/run_quietly.py dora start dataflow.yml --attach

The exit status is the command's. The command runs in a process group of its own, and Ctrl-C
(SIGINT), SIGTERM, SIGHUP (the terminal closed) or SIGQUIT (Ctrl-\\) given to this process is passed
on to it exactly once (a terminal would send it to both: dora takes a second Ctrl-C as "kill now");
output keeps flowing until the command has ended, so its last words (the receiver's summary) are
not lost. Where nothing reads this process's output any more (`make run | head -2`, a closed
terminal), the command is stopped as by one Ctrl-C (unless a signal was passed on already) and its
output read to the end and dropped: it must not run on with no one to see it, or be left behind
when this process ends. A line is read MAX_LINE characters at a time: a longer one (output without
a newline) is passed on in pieces, never held whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO

SHOW_ALL = "TC_DORA_DIAGNOSTICS"  # "1": hide nothing
MAX_LINE = 1 << 16  # characters read at a time; dora's lines are under a kilobyte
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@dataclass(frozen=True)
class Known:
    """A kind of line dora prints that says nothing is wrong: `marker` is in every such line."""

    marker: str
    what: str  # why it is harmless, for the closing line


KNOWN = (
    Known(
        "(dora-rs/dora#2742 diagnostic)",
        "dora 1.1 traces each node's first 3 large sends as warnings while its developers look for a "
        "Windows hang (dora-rs/dora#2742); nothing is wrong",
    ),
    Known(
        "zenoh::api::admin Unable to find transport for link event",
        "zenoh (dora's transport between nodes) notes a link event of a connection already closed, as "
        "nodes end; nothing is wrong",
    ),
    Known(
        "error setting scheduling priority for thread",
        "zenoh's shared-memory watchdog threads could not get real-time priority (a container without "
        "CAP_SYS_NICE; seen on the GPU host, issue 37) and run at normal priority, which zenoh itself "
        "calls safe to ignore; nothing is wrong",
    ),
)


class Filter:
    """Lines in, the lines to show out; counts what it hid, per kind."""

    def __init__(self, known: Iterable[Known] = KNOWN, show_all: bool = False):
        self.known = tuple(known)
        self.show_all = show_all
        self.hidden: dict[Known, int] = {}

    def lines(self, lines: Iterable[str]) -> Iterator[str]:
        """`lines` (a long one may come in pieces: only its last ends with a newline) less the
        known ones. A piece of a longer line is always shown: a marker in a piece does not make
        the whole line one of dora's."""
        starts_line = True
        for line in lines:
            whole = starts_line and line.endswith("\n")
            starts_line = line.endswith("\n")
            kind = None if self.show_all or not whole else next((k for k in self.known if k.marker in line), None)
            if kind is None:
                yield line
            else:
                self.hidden[kind] = self.hidden.get(kind, 0) + 1

    def closing_line(self) -> str | None:
        """One line naming what was hidden and why, or None when nothing was."""
        if not self.hidden:
            return None
        parts = [f"{count} line{'s' if count != 1 else ''}: {kind.what}" for kind, count in self.hidden.items()]
        return f"(hidden: {'; '.join(parts)}; {SHOW_ALL}=1 shows them)"


def pieces(stream: IO[str], limit: int = MAX_LINE) -> Iterator[str]:
    """`stream`'s lines, at most `limit` characters at a time: a longer line comes in pieces."""
    return iter(lambda: stream.readline(limit), "")


def pass_on(lines: Iterable[str], out: IO[str]) -> bool:
    """Write `lines` to `out` as they come; -> False as soon as nothing reads `out` any more (a
    closed pipe: BrokenPipeError; a closed terminal: EIO), True once `lines` ran out."""
    for line in lines:
        try:
            out.write(line)
            out.flush()
        except OSError:
            return False
    return True


def silence(out: IO[str]) -> None:
    """Point `out`'s file at /dev/null, so what it still holds (flushed again as the interpreter
    exits) goes nowhere instead of raising again; a stream without a file is left as it is."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def run(command: list[str], out: IO[str] = sys.stdout, show_all: bool | None = None) -> int:
    """Run `command` with its stdout and stderr merged into `out`, filtered; -> its exit status."""
    if show_all is None:
        show_all = os.environ.get(SHOW_ALL, "") == "1"
    filtering = Filter(show_all=show_all)
    with subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
        process_group=0,
    ) as proc:
        forwarded: list[int] = []

        def forward(signum: int, frame: object) -> None:
            forwarded.append(signum)
            proc.send_signal(signum)

        previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
        try:
            assert proc.stdout is not None
            read_to_the_end = pass_on(filtering.lines(pieces(proc.stdout)), out)
            if not read_to_the_end:
                if not forwarded:  # one Ctrl-C: dora stops the dataflow (a second would kill it)
                    proc.send_signal(signal.SIGINT)
                silence(out)
                for _ in pieces(proc.stdout):  # read on, so the command is never blocked writing
                    pass
            status = proc.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    closing = filtering.closing_line()
    if closing is not None and read_to_the_end:
        print(closing, file=out, flush=True)
    return status


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python tools/run_quietly.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    try:
        return run(args)
    except FileNotFoundError as e:
        print(f"run_quietly: cannot run {args[0]!r}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
