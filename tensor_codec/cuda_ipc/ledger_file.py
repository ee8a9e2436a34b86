"""The release ledger's file (ledger.py uses it): its layout in shared memory, and how a file
under a world-writable directory is opened, mapped, locked and removed (docs/cuda-ipc-design.md,
"No file it did not make"). Slots are guarded by POSIX record locks on their byte range plus a
thread lock, so a claim's check-and-set is atomic across processes. Nothing here touches CUDA.

File header (HEADER_BYTES): the magic (8 bytes), u32 slots, u32 SLOT_BYTES, then the producer's
pid namespace (for `remove_stale_ledgers`). Slot layout (little endian), SLOT_BYTES each:

    0   u64  generation      (0 = never used; a freed slot holds the one its next publish takes)
    8   u16  state           (0 free, 1 live)
    10  u16  per_process     (claims one receiving process may make: its inputs on the output)
    12  u16  expected        (receivers the producer expects)
    14  u16  claims          (holder entries in use)
    16  u64  published_ns    (CLOCK_MONOTONIC, shared by every process of the machine)
    24  u64  nbytes          (for reports)
    32  HOLDERS x 16 bytes:  i32 pid, u32 state word, u64 claimed_ns (CLOCK_MONOTONIC)

A holder's state word is its state (low byte: 0 empty, 1 holding, 2 released) and the low 24 bits
of the generation it was claimed at (`holder_word`), in the machine's own byte order: a release
writes it, and the producer reads it, as one aligned 4-byte access without the lock
(docs/cuda-ipc-design.md, "Locks per message").
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import struct
import threading

from ..errors import CodecError
from ..wire.cuda_ipc import HOLDERS
from .identity import pid_alive, pid_namespace

__all__ = [
    "LedgerError",
    "LedgerClosed",
    "create_ledger_file",
    "open_ledger_file",
    "remove_stale_ledgers",
    "slot_offset",
    "signature",
]

# 02: claims capped per process (`per_process` in the slot head); 03: no release event per holder;
# 04: a holder's state word carries its generation, releases take no lock, a freed slot holds the
# generation its next publish takes
MAGIC = b"tcledg04"
MAGIC_FAMILY = MAGIC[:6]  # any version's: a stale ledger of an older tensor_codec is removed too
HEADER_BYTES = 64
SLOT_HEAD_BYTES = 32
SLOT_HEAD = struct.Struct("<QHHHHQQ")  # generation, state, per_process, expected, claims, published_ns, nbytes
HOLDER = struct.Struct("<iIQ")  # pid, state, claimed_ns
HOLDER_BYTES = HOLDER.size
SLOT_BYTES = SLOT_HEAD_BYTES + HOLDERS * HOLDER_BYTES
SHM_DIR = "/dev/shm"
# A path under a world-writable directory may be anything another user put there: no symbolic
# link is followed, and a FIFO's open returns at once instead of waiting for a writer.
_UNTRUSTED_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CLAIMS = struct.Struct("<H")  # the claims field, at offset 14 of a slot

FREE, LIVE = 0, 1
HOLDING, RELEASED = 1, 2  # a holder's state (0: an empty entry)
# The state word alone, at offset 4 of a holder: native ('@') so that struct packs and unpacks it
# with one memcpy of 4 bytes (one aligned access; its '<' form goes a byte at a time).
STATE_WORD = struct.Struct("@I")
STATE_WORD_AT = 4


def holder_word(state: int, generation: int) -> int:
    """A holder's state word: `state` claimed at `generation` (its low 24 bits)."""
    return state | (generation & 0xFFFFFF) << 8


class LedgerError(CodecError, RuntimeError):
    """A slot that cannot be claimed or released (expired, full, unknown ledger)."""


class LedgerClosed(LedgerError):
    """A ledger this process has closed: a receiver closes a view others may still use only when
    its producer has exited (receiving.Receiver), so a claim on it is refused as expired."""


def slot_offset(slot: int) -> int:
    return HEADER_BYTES + slot * SLOT_BYTES


def signature(m: mmap.mmap, start: int) -> bytes:
    """A slot's head and its claimed holders' entries, as bytes: any claim or release changes them.
    Bytes of the same length at the same place later hold the same claims count (it is among
    them): equal bytes there are an unchanged signature."""
    claims = min(_CLAIMS.unpack_from(m, start + 14)[0], HOLDERS)
    return m[start : start + SLOT_HEAD_BYTES + claims * HOLDER_BYTES]


def open_own_file(path: str, flags: int) -> int:
    """Open `path`, under a directory anyone may write to (/dev/shm), only if it is a regular file
    of this user -> its descriptor; never following a symbolic link, never waiting on a FIFO.
    LedgerError naming what is there instead (a symbolic link, a FIFO, another user's file);
    OSError where the open itself fails (no such file, a directory opened for writing)."""
    try:
        fd = os.open(path, flags | _UNTRUSTED_OPEN, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a symbolic link
            raise LedgerError("expected a regular file of this user, got a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LedgerError(f"expected a regular file of this user, got {_file_kind(st.st_mode)}")
        if st.st_uid != os.geteuid():
            raise LedgerError(f"expected a regular file of this user (uid {os.geteuid()}), got one of uid {st.st_uid}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else f"file type {stat.S_IFMT(mode):o}"


class LedgerFile:
    """An mmap'ed file under /dev/shm with per-slot record locks."""

    def __init__(self, name: str, size: int | None, directory: str = SHM_DIR):
        """Create a file of `size` bytes, or open an existing one (`size` None)."""
        create = size is not None
        if "/" in name or "\0" in name or not name.startswith("tc-"):
            raise LedgerError(f"ledger: expected a name like 'tc-...', got {name!r}")
        self.path = os.path.join(directory, name)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        try:
            self.fd = open_own_file(self.path, flags)
        except FileNotFoundError:
            raise LedgerError(f"ledger: {name!r} does not exist (its producer has exited?)") from None
        except LedgerError as e:  # a name from the network: a symbolic link, a FIFO, another user's file
            raise LedgerError(f"ledger: {name!r}: {e}") from None
        except OSError as e:  # a directory, a file this user may not open, ...
            raise LedgerError(f"ledger: {name!r} cannot be opened: {e.strerror or e}") from None
        try:
            if size is not None:
                os.ftruncate(self.fd, size)
            actual = os.fstat(self.fd).st_size
            if actual < HEADER_BYTES:
                raise LedgerError(f"ledger: {name!r} is {actual} bytes, expected at least {HEADER_BYTES}")
            self.map = mmap.mmap(self.fd, actual)
        except BaseException as e:
            os.close(self.fd)
            if create or not isinstance(e, (OSError, ValueError)):  # not a file mmap refused after all
                raise
            raise LedgerError(f"ledger: {name!r} cannot be mapped: {e}") from None
        self.size = actual
        self.thread_lock = threading.Lock()
        self.sections = 0  # locked sections entered, all told (each is two lockf calls)
        self.closed = False

    def locked(self, start: int, length: int):
        return _RangeLock(self, start, length)

    def lock(self, start: int, length: int) -> None:
        """Enter a locked section of bytes [start, start + length) (`locked`'s, without the
        context object: the claim, once per message, calls it and `unlock` itself)."""
        self.thread_lock.acquire()
        try:
            if self.closed:  # (its descriptor's number may name another file by now)
                raise LedgerClosed(f"ledger: {os.path.basename(self.path)!r} was closed by this process")
            fcntl.lockf(self.fd, fcntl.LOCK_EX, length, start)
        except BaseException:
            self.thread_lock.release()
            raise
        self.sections += 1

    def unlock(self, start: int, length: int) -> None:
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, length, start)
        finally:
            self.thread_lock.release()

    def close(self) -> None:
        """Unmap and close, once; a section entered after it is refused (`LedgerClosed`). (POSIX
        record locks are the process's: closing any descriptor of the file drops all of them, so
        a process keeps one open view of each ledger: receiving.Receiver.)"""
        with self.thread_lock:
            if self.closed:
                return
            self.closed = True
            try:
                self.map.close()
            finally:
                os.close(self.fd)


class _RangeLock:
    __slots__ = ("f", "start", "length")  # one is made per locked section

    def __init__(self, f: LedgerFile, start: int, length: int):
        self.f, self.start, self.length = f, start, length

    def __enter__(self):
        self.f.lock(self.start, self.length)

    def __exit__(self, *exc):
        self.f.unlock(self.start, self.length)


def create_ledger_file(name: str, slots: int, directory: str = SHM_DIR) -> LedgerFile:
    """A new ledger file of `slots` free slots, its header written."""
    f = LedgerFile(name, HEADER_BYTES + slots * SLOT_BYTES, directory)
    f.map[0:16] = MAGIC + struct.pack("<II", slots, SLOT_BYTES)
    # Who made it, so a later producer can tell a crashed one's file from a live one's.
    f.map[16:HEADER_BYTES] = pid_namespace().encode()[: HEADER_BYTES - 16].ljust(HEADER_BYTES - 16, b"\0")
    return f


def open_ledger_file(name: str, directory: str = SHM_DIR) -> tuple[LedgerFile, int]:
    """A producer's ledger file (a name from a message: hostile) and its slot count; LedgerError
    for anything that is not a ledger of this version with every slot it says it has."""
    f = LedgerFile(name, None, directory)
    magic, slots, slot_bytes = f.map[0:8], *struct.unpack_from("<II", f.map, 8)
    if magic != MAGIC or slot_bytes != SLOT_BYTES:
        why = (
            f"is not a tensor_codec ledger of this version: expected {MAGIC!r} with {SLOT_BYTES}-byte slots, "
            f"got {magic!r:.40} with {slot_bytes} (another tensor_codec's, or no ledger)"
        )
    elif f.size < HEADER_BYTES + slots * SLOT_BYTES:
        why = f"is {f.size} bytes, expected {HEADER_BYTES + slots * SLOT_BYTES} for {slots} slots"
    else:
        return f, slots
    f.close()
    raise LedgerError(f"ledger: {name!r} {why}")


def remove_stale_ledgers(*, directory: str = SHM_DIR) -> int:
    """Remove ledger files left by producers of this pid namespace that died without closing
    theirs (a crash, SIGKILL); -> how many. Files of other namespaces, and anything that is not a
    regular file of this user (`open_own_file`: a FIFO, a symbolic link, another user's file),
    are left alone, and nothing found there can make this wait."""
    mine = pid_namespace().encode()[: HEADER_BYTES - 16]
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "tc" or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid == os.getpid() or pid_alive(pid):
            continue
        path = os.path.join(directory, name)
        try:
            fd = open_own_file(path, os.O_RDONLY)
        except (OSError, LedgerError):
            continue
        try:
            head = os.pread(fd, HEADER_BYTES, 0)
        except OSError:
            continue
        finally:
            os.close(fd)
        if head[:6] != MAGIC_FAMILY or head[16:].rstrip(b"\0") != mine:
            continue
        try:
            os.unlink(path)  # the directory is sticky (/dev/shm): no other user can put another file at this name
            removed += 1
        except OSError:
            pass
    return removed
