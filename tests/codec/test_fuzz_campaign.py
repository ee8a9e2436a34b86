"""The decode fuzzer (tools/fuzz, `make fuzz`): CI runs a short slice of it, and the harness itself
is tested, so it cannot pass silently: a worker that crashes (abort, SIGSEGV), a case that hangs
and a case that raises must each be counted and written as a reproducer, and the run must go on.
docs/fuzzing.md has the full campaign."""

from __future__ import annotations

import json
import re
import time

import pytest

from tools.fuzz import encoding
from tools.fuzz.__main__ import main as fuzz_main
from tools.fuzz.runner import EXPECTED, REPRO_FORMAT, Config, format_summary, load_reproducer, run

CI_SEED = 20240601
CI_CASES = 2500


@pytest.mark.slow  # 2,500 fuzz cases
def test_ci_slice_only_ok_and_decode_error(tmp_path):
    """A fixed slice of the campaign: every case ends in ok or DecodeError, nothing crashes or hangs."""
    began = time.monotonic()
    summary = run(Config(cases=CI_CASES, seed=CI_SEED, workers=2, timeout=10.0, out=tmp_path, progress=False))
    report = format_summary(summary)
    assert summary.done == CI_CASES, report
    assert set(summary.outcomes) <= set(EXPECTED), report
    # the slice reaches both: messages the decoder accepts (deep paths) and ones it refuses
    assert summary.outcomes["ok"] > CI_CASES // 20 and summary.outcomes["DecodeError"] > CI_CASES // 2, report
    assert summary.ok and not summary.reproducers, report
    assert (tmp_path / f"summary-{CI_SEED}.json").exists()
    print(f"\n{report}\n(slice took {time.monotonic() - began:.1f} s)")


@pytest.mark.slow  # worker processes, a hang timed out
def test_harness_records_crash_hang_and_exception_with_reproducers(tmp_path):
    """Injected faults (tools/fuzz/worker.py): abort and NULL dereference kill the worker, a sleep
    outlives the per-case timeout, an exception is an unexpected outcome. Each is counted once, has
    a JSON reproducer holding the message, and the other cases still run."""
    inject = {"abort": [3], "segv": [11], "hang": [20], "raise": [27], "exit": [35]}
    summary = run(
        Config(
            cases=40,
            seed=5,
            workers=2,
            timeout=4.0,
            alone_timeout=4.0,  # the injected hang is one anywhere: waiting longer alone proves nothing more
            out=tmp_path,
            batch=8,
            inject=inject,
            progress=False,
        )
    )
    report = format_summary(summary)
    assert summary.done == 40, report
    assert (
        summary.outcomes["crash"] == 3 and summary.outcomes["hang"] == 1 and summary.outcomes["other:RuntimeError"] == 1
    ), report
    assert summary.outcomes["ok"] + summary.outcomes["DecodeError"] == 35, report
    assert not summary.ok and summary.worker_restarts == 4, report
    recorded = {r["index"]: r for r in summary.reproducers}
    assert sorted(recorded) == [3, 11, 20, 27, 35], report
    expect = {
        3: ("crash", "SIGABRT"),
        11: ("crash", "SIGSEGV"),
        20: ("hang", "after 4 s"),
        27: ("other:RuntimeError", "injected"),
        35: ("crash", "status 3"),
    }
    for index, (outcome, words) in expect.items():
        path = tmp_path / f"repro-5-{index}.json"
        assert recorded[index]["path"] == str(path)
        raw = json.loads(path.read_text())  # plain JSON, no pickle anywhere
        assert raw["format"] == REPRO_FORMAT and raw["seed"] == 5 and raw["index"] == index
        assert raw["outcome"] == outcome and words in raw["detail"], raw["detail"]
        record = load_reproducer(path)
        assert type(record["case"]["metadata"]) in (dict, list, str, bytes, tuple, int, type(None))
        assert record["case"]["value"]["kind"] and record["case"]["call"]["api"] in ("decode", "receive")
    assert "injected failure at case 27" in json.loads((tmp_path / "repro-5-27.json").read_text())["traceback"]
    # the message that was running when the worker died is the message case 3 makes
    from tools.fuzz.mutators import make_case
    from tools.fuzz.seeds import build_seeds

    made = make_case(build_seeds(), 5, 3)
    assert encoding.dumps(load_reproducer(tmp_path / "repro-5-3.json")["case"]) == encoding.dumps(
        {k: made[k] for k in ("metadata", "value", "call")}
    )


@pytest.mark.slow  # worker processes, two cases timed out
def test_a_suspected_hang_is_run_again_alone_and_counted_as_what_it_ends_in(tmp_path):
    """`make fuzz` called two cases hangs that replayed as DecodeError in 7-41 ms: its per-case
    timeout was met by the machine's load alone. A case past the timeout beside the other workers
    is run again alone (a fresh worker, a longer timeout); only a case that hangs there too is a
    hang. Case 4 stalls only beside other cases (the load it met), case 9 hangs anywhere."""
    summary = run(
        Config(
            cases=12,
            seed=5,
            workers=2,
            timeout=4.0,
            alone_timeout=6.0,
            out=tmp_path,
            batch=6,
            inject={"stall": [4], "hang": [9]},
            progress=False,
        )
    )
    report = format_summary(summary)
    assert summary.done == 12 and summary.outcomes["hang"] == 1, report
    assert summary.outcomes["ok"] + summary.outcomes["DecodeError"] == 11, report
    assert [r["index"] for r in summary.reproducers] == [9], report  # case 4 counted as what it ended in
    assert "run again alone in a fresh worker, still running after 6 s" in summary.reproducers[0]["detail"], report
    assert summary.hangs_replayed_clean == summary.suspected_hangs - 1 >= 1, report  # case 4, and any the load held
    clean, suspected = summary.hangs_replayed_clean, summary.suspected_hangs
    assert f"suspected hangs: {suspected} (past 4 s beside the other workers), {clean} replayed clean alone" in report
    assert summary.as_dict()["alone_timeout_s"] == 6.0 and not summary.ok


@pytest.mark.slow  # worker processes, one restarted after a crash
def test_cli_exit_status_json_and_replay(tmp_path, capsys):
    """`python -m tools.fuzz`: exit 1 and a JSON summary when a case crashed; --replay decodes a
    reproducer in-process (the injected fault is not part of the message, so it now decodes)."""
    status = fuzz_main(
        [
            "--cases",
            "12",
            "--seed",
            "9",
            "--workers",
            "1",
            "--out",
            str(tmp_path),
            "--json",
            "--quiet",
            "--inject",
            "exit:4",
        ]
    )
    out = capsys.readouterr().out
    summary = json.loads(out)
    assert status == 1 and summary["outcomes"]["crash"] == 1 and summary["completed"] == 12 and not summary["passed"]
    assert summary["reproducers"][0]["path"] == str(tmp_path / "repro-9-4.json")
    status = fuzz_main(["--replay", str(tmp_path / "repro-9-4.json"), "--json"])
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["recorded"] == "crash" and replayed["outcome"] in EXPECTED and status == 0


def test_cases_are_deterministic_and_survive_json():
    """Case i of seed s is the same message every time, and its JSON form reads back exactly."""
    from tools.fuzz.execute import run_case
    from tools.fuzz.mutators import make_case
    from tools.fuzz.seeds import build_seeds

    seeds = build_seeds()
    outcomes = set()
    for index in range(300):
        a, b = make_case(seeds, 77, index), make_case(seeds, 77, index)
        text = encoding.dumps(a)
        assert text == encoding.dumps(b)
        back = encoding.loads(text)
        assert encoding.dumps(back) == text
        outcomes.add(run_case(back, index).outcome)
    assert {"ok", "DecodeError"} <= outcomes


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        -0.0,
        1e308,
        2**200,
        -(2**63),
        "\ud800x",
        b"\x00\xff",
        (1, [2, (3,)]),
        {1: "a", "$x": None, "k": {"$bytes": 1}},
    ],
)
def test_encoding_round_trips_what_json_lacks(value):
    text = encoding.dumps({"v": value})
    back = encoding.loads(text)["v"]
    assert encoding.dumps({"v": back}) == text and type(back) is type(value)


def test_the_oracle_refuses_a_decoded_lone_surrogate_anywhere():
    """What tc.decode returns must be what tc.encode takes: a lone surrogate (which a JSON escape
    can spell) in a key or a value is a finding."""
    from collections import namedtuple

    from tools.fuzz.execute import Mismatch, _check_strings

    _check_strings({"k": ["v", ("t", "\U0001f600")]})  # a character outside the BMP is text
    point = namedtuple("P", "a")  # (Python refuses a type name with a lone surrogate: none to check there)
    for bad in ({"\ud800": 1}, {"k": ["\udfff"]}, point("\ud800")):
        with pytest.raises(Mismatch, match="lone surrogate"):
            _check_strings(bad)


def test_the_oracle_refuses_a_decoded_message_a_reader_must_refuse():
    """Wire format 2's envelope (tools/fuzz/execute.py): a message that decoded with version 1's
    tc.version key, a header version other than the int 2, a transport no reader has, or a top-level
    key its transport does not add, is a finding."""
    from tools.fuzz.execute import Mismatch, _check_accepted

    good = {"version": 2, "transport": "host", "leaves": [], "gpu": "GPU-0", "tree": None}
    # A stray tc.transport alone (no tc.version): a tc.* key the reader does not know, ignored as
    # the host reader ignores tc.ipc.* keys (senders never write one: the prefix is reserved).
    _check_accepted({"tc.header": "", "tc.transport": "host"}, good)
    _check_accepted({}, {"version": 2, "transport": "cuda-ipc", "leaves": [], "producer": {}, "tree": None})
    bad = [
        ({"tc.version": 1}, good, "tc.version"),
        ({}, {**good, "version": 1}, "version is 1"),
        ({}, {**good, "version": 2.0}, "version is 2.0"),
        ({}, {**good, "version": True}, "version is True"),
        ({}, {k: v for k, v in good.items() if k != "version"}, "version is None"),
        ({}, {**good, "transport": "HOST"}, "transport is 'HOST'"),
        ({}, {**good, "transport": None}, "transport is None"),
        ({}, {**good, "producer": {}}, "other keys: ['producer']"),
        ({}, [good], "header is a list"),
    ]
    for metadata, header, words in bad:
        with pytest.raises(Mismatch, match=re.escape(words)):
            _check_accepted(metadata, header)


def test_version_and_transport_mutations_exist_and_a_stray_tc_version_never_decodes():
    """Version 1's mutations of its tc.version and tc.transport keys live on as mutations of the
    header's `version` and `transport` members (top.version, top.transport; meta.transport swaps
    the transport), and version 1's keys come back beside the header (meta.v1_keys): each is
    applied in a short slice, and no case that carries tc.version decodes."""
    from tools.fuzz.execute import run_case
    from tools.fuzz.mutators import MUTATORS, make_case
    from tools.fuzz.seeds import build_seeds

    envelope = {"top.version", "top.transport", "meta.transport", "meta.v1_keys"}
    assert envelope <= {m.name for m in MUTATORS}
    seeds = build_seeds()
    applied: set[str] = set()
    stray = 0
    for index in range(1500):
        case = make_case(seeds, 11, index)
        applied.update(case["mutators"])
        if type(case["metadata"]) is dict and "tc.version" in case["metadata"]:
            stray += 1
            outcome = run_case(case, index)
            assert outcome.outcome == "DecodeError", (index, case["mutators"], outcome)
    assert envelope <= applied and stray > 10, (sorted(envelope - applied), stray)
