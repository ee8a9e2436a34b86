"""Helpers for the CUDA IPC tests: a receiver in another process (the ledger counts receivers by
process), and a call that must return at once though a FIFO may be in its way."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tensor_codec.cuda_ipc.ledger import LedgerView, SlotRef
from tensor_codec.cuda_ipc.ledger_file import SHM_DIR

JOIN_S = 60.0  # generous on a loaded machine: each call returns in milliseconds unless it blocks


def _claim_and_release(name: str, directory: str, slot: int, generation: int) -> None:
    try:
        view = LedgerView(name, directory=directory)
        ref = SlotRef(name, slot, generation)
        view.claim(ref)
        view.release(ref)
    except BaseException:
        os._exit(1)
    os._exit(0)  # no cleanup of the parent's state, copied by fork


def claim_and_release_elsewhere(ref: SlotRef, directory: str = SHM_DIR) -> None:
    """Another process (another receiver, to the ledger) claims the message and releases it."""
    ctx = mp.get_context("fork")
    proc = ctx.Process(target=_claim_and_release, args=(ref.ledger, directory, ref.slot, ref.generation))
    proc.start()
    proc.join(JOIN_S)
    assert proc.exitcode == 0, f"the other receiver could not claim and release the message (exit {proc.exitcode})"


def slot_of(metadata: dict) -> SlotRef:
    """The ledger slot a CUDA IPC message names."""
    ledger = json.loads(metadata["tc.header"])["producer"]["ledger"]
    return SlotRef(ledger, metadata["tc.ipc.slot"], metadata["tc.ipc.generation"])


def returns_at_once(call: Callable[[], Any], fifos: Sequence[str] = ()) -> Any:
    """call() in a thread; its result (or its exception). If it has not returned after JOIN_S (an
    open of one of `fifos` waiting for a writer), each FIFO is opened for writing so the call can
    end, and the test fails instead of hanging the suite."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as e:
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(JOIN_S)
    if thread.is_alive():
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the blocked reader's open returns
            except OSError:
                pass
        thread.join(JOIN_S)
        pytest.fail(f"the call did not return within {JOIN_S:.0f} s: it waited on a FIFO")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
