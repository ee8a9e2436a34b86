"""tools/run_quietly.py: what `make run` passes dora's output through."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import textwrap

from tests.support.dora import ROOT
from tools.run_quietly import KNOWN, SHOW_ALL, Filter, run

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
