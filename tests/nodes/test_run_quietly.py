"""tools/run_quietly.py: what `make run` passes dora's output through."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support.dora import ROOT
from tools.run_quietly import KNOWN, MAX_LINE, SHOW_ALL, Filter, run

DIAGNOSTIC = (
    "02:09:10 WARN   load-sender: dora_node_api::node output `tensors`: 1179976 B -> zenoh direct path "
    "(dora-rs/dora#2742 diagnostic)\n"
)
REAL_WARNING = "02:09:10 WARN   camera: dora_node_api::node output `image` is not declared\n"


def test_doras_known_diagnostics_are_hidden_counted_and_named_once():
    lines = ["started\n", DIAGNOSTIC, REAL_WARNING, DIAGNOSTIC, "summary: PASS\n"]
    quiet = Filter()
    assert list(quiet.lines(lines)) == ["started\n", REAL_WARNING, "summary: PASS\n"]  # a real warning stays
    closing = quiet.closing_line()
    assert closing is not None and closing.startswith("(hidden: 2 lines: dora 1.1 traces")
    assert not re.search(r"\b(WARN|ERROR)\b", closing)  # the line about the alarms is not one
    assert "dora-rs/dora#2742" in closing and f"{SHOW_ALL}=1 shows them" in closing
    everything = Filter(show_all=True)
    assert list(everything.lines(lines)) == lines and everything.closing_line() is None
    assert Filter().closing_line() is None and KNOWN[0].marker in DIAGNOSTIC


def test_zenohs_watchdog_priority_notes_are_hidden():
    """As root in a container without CAP_SYS_NICE (the GPU host, issue 37) every node's zenoh
    shared-memory watchdog says, at WARN, that its threads run at normal priority; harmless by
    zenoh's own words, so hidden like dora's trace; a real warning next to them stays."""
    note = (
        '14:42:30 WARN   jpeg-encoder: zenoh_shm::watchdog::periodic_task Some("Watchdog Confirmator"): error '
        "setting scheduling priority for thread: OS(1), will run with priority 98. This is not an hard error "
        "and it can be safely ignored under normal operating conditions.\n"
    )
    quiet = Filter()
    assert list(quiet.lines([note, REAL_WARNING, note])) == [REAL_WARNING]
    closing = quiet.closing_line()
    assert closing is not None and "2 lines: zenoh's shared-memory watchdog" in closing


def test_the_commands_output_and_exit_status_come_through():
    script = f"import sys; print('one'); print({DIAGNOSTIC.strip()!r}); print('two', file=sys.stderr); sys.exit(3)"
    out = io.StringIO()
    assert run([sys.executable, "-c", script], out=out, show_all=False) == 3
    text = out.getvalue()
    assert text.splitlines()[:2] == ["one", "two"] and "(hidden: 1 line: " in text and "#2742 diagnostic)" not in text


def test_ctrl_c_reaches_the_command_once_and_its_last_words_are_kept():
    """dora takes a second Ctrl-C as "kill now": the command is in its own process group and gets
    the one this process got, then its summary still comes through."""
    child = textwrap.dedent(
        """
        import signal, sys, time
        got = []
        signal.signal(signal.SIGINT, lambda *a: got.append(1))
        print("ready", flush=True)
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # a second SIGINT, if one came, would be counted by now
        print(f"summary after {len(got)} SIGINT", flush=True)
        sys.exit(130)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "run_quietly.py"), sys.executable, "-c", child],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert rest == "summary after 1 SIGINT\n" and proc.returncode == 130


# A stand-in for `dora start --attach`: it says its pid, records each signal it gets (its name, a
# line in argv[1]), ends on the first with status 3, and, like dora, runs on when nothing reads its
# output any more. "chatty" (argv[2]): a line every 20 ms meanwhile. It ends by itself after 60 s
# whatever happens; the tests kill it sooner.
STAND_IN = textwrap.dedent(
    """
    import os, signal, sys, time
    record, chatty = sys.argv[1], sys.argv[2] == "chatty"
    got = []
    def note(signum, frame):
        got.append(signum)
        with open(record, "a") as f:
            f.write(signal.Signals(signum).name + "\\n")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, note)
    def say(text):
        try:
            print(text, flush=True)
        except OSError:  # nothing reads it: dora goes on
            pass
    say(f"ready {os.getpid()}")
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        if chatty:
            say("tick")
        time.sleep(0.02)
    time.sleep(0.3)  # a second signal, if one came, would be recorded by now
    say("bye")
    sys.exit(3)
    """
)


@contextlib.contextmanager
def quietly_running(tmp_path, chatty: bool):
    """run_quietly.py running the stand-in; -> (run_quietly's process, the file of the stand-in's
    signals). Both are killed on the way out, whatever the test did."""
    record = tmp_path / "signals"
    record.touch()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "run_quietly.py"), sys.executable, "-c", STAND_IN, str(record)]
        + ["chatty" if chatty else "quiet"],
        stdout=subprocess.PIPE,
        text=True,
    )
    stand_in = None
    try:
        first = proc.stdout.readline()
        assert first.startswith("ready "), first
        stand_in = int(first.split()[1])
        yield proc, record
    finally:
        proc.kill()
        proc.wait()
        if stand_in is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stand_in, signal.SIGKILL)  # in its own process group: not killed with run_quietly


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT], ids=["SIGHUP", "SIGQUIT"])
def test_a_closed_terminal_or_ctrl_backslash_reaches_the_command_too(tmp_path, sig):
    """SIGHUP (the terminal closed) or SIGQUIT ended run_quietly and left dora running, orphaned."""
    with quietly_running(tmp_path, chatty=False) as (proc, record):
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=30)
        assert record.read_text().split() == [sig.name]
        assert rest == "bye\n" and proc.returncode == 3


def test_when_nothing_reads_its_output_the_command_is_stopped_with_one_ctrl_c(tmp_path):
    """`make run | head -2`: once head had its lines, run_quietly stopped at a BrokenPipeError
    and waited for dora, which ran on; the Ctrl-C that followed ended run_quietly only, and dora
    ran on, orphaned."""
    with quietly_running(tmp_path, chatty=True) as (proc, record):
        proc.stdout.close()  # the reader is gone
        assert proc.wait(timeout=30) == 3  # the command's status: it was stopped and ended
        assert record.read_text().split() == ["SIGINT"]  # once: dora takes a second as "kill now"


class Writes(io.StringIO):
    """An output that remembers how much each write handed it."""

    def __init__(self):
        super().__init__()
        self.sizes: list[int] = []

    def write(self, text: str) -> int:
        self.sizes.append(len(text))
        return super().write(text)


def test_a_line_without_a_newline_is_passed_on_in_pieces_never_held_whole():
    huge = 4 * MAX_LINE + 123
    script = f"import sys; sys.stdout.write('x' * {huge}); sys.stdout.write('\\nend\\n')"
    out = Writes()
    assert run([sys.executable, "-c", script], out=out, show_all=False) == 0
    assert out.getvalue() == "x" * huge + "\nend\n"
    assert max(out.sizes) <= MAX_LINE


def test_a_piece_of_a_longer_line_is_never_hidden():
    """A marker in the last piece of a long line does not make the whole line one of dora's."""
    pieces = ["x" * 10, DIAGNOSTIC, DIAGNOSTIC]  # a long line ending as a diagnostic, then one alone
    quiet = Filter()
    assert list(quiet.lines(pieces)) == pieces[:2]
    assert quiet.closing_line().startswith("(hidden: 1 line: ")
