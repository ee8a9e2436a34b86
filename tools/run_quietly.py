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
(SIGINT) or SIGTERM given to this process is passed on to it exactly once (a terminal would send it
to both: dora takes a second Ctrl-C as "kill now"); output keeps flowing until the command has
ended, so its last words (the receiver's summary) are not lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

SHOW_ALL = "TC_DORA_DIAGNOSTICS"  # "1": hide nothing


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
        for line in lines:
            kind = None if self.show_all else next((k for k in self.known if k.marker in line), None)
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


def run(command: list[str], out=sys.stdout, show_all: bool | None = None) -> int:
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

        def forward(signum: int, frame: object) -> None:
            proc.send_signal(signum)

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            assert proc.stdout is not None
            for line in filtering.lines(proc.stdout):
                out.write(line)
                out.flush()
            status = proc.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    closing = filtering.closing_line()
    if closing is not None:
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
