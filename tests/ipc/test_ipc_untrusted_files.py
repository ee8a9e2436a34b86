"""CUDA IPC trusts no file it did not make. /dev/shm is world-writable: another user may put a
FIFO (a plain open of it waits for a writer, forever), a symbolic link or a file of their own at
any name a producer or a receiver looks at. The producer's clean-up of stale ledgers skips them
without waiting; a receiver refuses a ledger name that is one of them. Each check runs in a
thread that must return at once (tests/ipc/other_process.py): a regression fails, never hangs."""

from __future__ import annotations

import os

import pytest
import torch

import tensor_codec as tc
from tensor_codec.cuda_ipc import transport as cuda_ipc
from tensor_codec.cuda_ipc.identity import pid_alive
from tensor_codec.cuda_ipc.ledger import Ledger, LedgerError, LedgerView, remove_stale_ledgers
from tensor_codec.cuda_ipc.producing import ProducerBook
from tensor_codec.cuda_ipc.receiving import Receiver
from tests.ipc.other_process import returns_at_once

NOBODY = 65534
KINDS = ["fifo", "symlink", "foreign"]
REFUSED = {
    "fifo": "expected a regular file of this user, got a FIFO",
    "symlink": "expected a regular file of this user, got a symbolic link",
    "foreign": rf"expected a regular file of this user \(uid \d+\), got one of uid {NOBODY}",
}


def dead_pid() -> int:
    """A pid no process has: the kernel allocates pids below pid_max."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read())
    assert not pid_alive(pid)
    return pid


def stale_ledger(directory, name: str) -> str:
    """A ledger of this user whose producer died without removing it (as after a SIGKILL)."""
    ledger = Ledger(slots=1, name=name, directory=str(directory))
    ledger.file.close()  # its process "died": the file stays
    return ledger.file.path


def plant(directory, kind: str, name: str) -> str:
    """What another user could leave at `name`: a FIFO, a symbolic link (to a stale ledger of
    this user's, which the clean-up would otherwise remove through the link), or a stale-looking
    ledger owned by nobody (root only: os.chown)."""
    path = os.path.join(directory, name)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        os.symlink(stale_ledger(directory, "tc-elsewhere"), path)  # a name the clean-up does not look at
    else:
        if os.geteuid() != 0:
            pytest.skip("a file of another user can only be made by root (os.chown)")
        stale_ledger(directory, name)
        os.chown(path, NOBODY, NOBODY)
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_the_stale_ledger_clean_up_skips_what_is_not_a_regular_file_of_this_user_at_once(tmp_path, kind):
    planted = plant(tmp_path, kind, f"tc-{dead_pid()}-{'a' * 12}")
    stale = stale_ledger(tmp_path, f"tc-{dead_pid()}-{'b' * 12}")
    removed = returns_at_once(lambda: remove_stale_ledgers(directory=str(tmp_path)), [planted])
    assert os.path.lexists(planted), f"the {kind} was removed"
    assert not os.path.exists(stale) and removed == 1  # a real stale ledger of this user still goes


def test_a_stale_ledger_of_an_older_version_is_removed_too(tmp_path):
    stale = stale_ledger(tmp_path, f"tc-{dead_pid()}-{'b' * 12}")
    with open(stale, "r+b") as f:
        f.write(b"tcledg01")
    assert remove_stale_ledgers(directory=str(tmp_path)) == 1 and not os.path.exists(stale)


def use_directory(backend, directory) -> None:
    """This process's CUDA IPC producer and receiver keep their ledgers in `directory`."""
    state = cuda_ipc._get_state()
    state.producer = ProducerBook(recycle=state.pool.give_back, directory=str(directory))
    state.receiver = Receiver(backend, directory=str(directory))


def test_the_first_send_returns_with_a_fifo_where_stale_ledgers_are_looked_for(fake, tmp_path):
    """The issue's hang: the producer's first send cleans up stale ledgers before making its own."""
    ledgers = tmp_path / "shm"
    ledgers.mkdir()
    fifo = str(ledgers / f"tc-{dead_pid()}-{'c' * 12}")
    os.mkfifo(fifo)
    use_directory(fake, ledgers)
    value, metadata = returns_at_once(lambda: tc.encode(torch.arange(10.0), transport="cuda-ipc"), [fifo])
    assert tc.decode(value, metadata).tolist() == list(range(10))
    assert os.path.lexists(fifo)


@pytest.mark.parametrize("kind", KINDS)
def test_a_receiver_refuses_a_ledger_name_that_is_not_a_regular_file_of_this_user(tmp_path, kind):
    name = f"tc-{os.getpid()}-{'d' * 12}"
    planted = plant(tmp_path, kind, name)
    with pytest.raises(LedgerError, match=rf"^ledger: '{name}': {REFUSED[kind]}$"):
        returns_at_once(lambda: LedgerView(name, directory=str(tmp_path)), [planted])


@pytest.mark.parametrize("kind", KINDS)
def test_a_message_whose_ledger_was_replaced_is_a_decode_error(fake, tmp_path, kind):
    """The ledger a message names, swapped for a FIFO, a link to it, or the same file given to
    another user, before this process first opened it."""
    use_directory(fake, tmp_path)
    value, metadata = tc.encode(torch.arange(10.0), transport="cuda-ipc")
    path = cuda_ipc._get_state().producer.ledger.file.path
    if kind == "foreign":
        plant(tmp_path, kind, "tc-probe")  # skips unless this user may give a file away
        os.chown(path, NOBODY, NOBODY)
    else:
        os.rename(path, path + ".moved")
        if kind == "fifo":
            os.mkfifo(path)
        else:
            os.symlink(path + ".moved", path)
    with pytest.raises(tc.DecodeError, match=rf"^tc.ipc.slot: ledger: 'tc-\d+-[0-9a-f]{{12}}': {REFUSED[kind]}$"):
        returns_at_once(lambda: tc.decode(value, metadata), [path])
