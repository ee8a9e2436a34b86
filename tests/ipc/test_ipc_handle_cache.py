"""The receiver's cache of opened producer segments, with a stand-in for the CUDA opening."""

from __future__ import annotations

import threading

import pytest

from tensor_codec.cuda_ipc import handle_cache
from tensor_codec.cuda_ipc.handle_cache import HandleCache


class Opener:
    def __init__(self):
        self.opened = []

    def __call__(self, handle, device_index):
        self.opened.append((handle, device_index))
        return object()


def test_each_segment_is_opened_once_and_reused():
    opener = Opener()
    cache = HandleCache(opener)
    a = cache.get("p1", None, b"h1", 0)
    assert cache.get("p1", None, b"h1", 0) is a
    b = cache.get("p1", None, b"h2", 0)
    assert b is not a and opener.opened == [(b"h1", 0), (b"h2", 0)]
    assert (cache.hits, cache.misses) == (1, 2)


def test_a_new_handle_is_a_new_segment_even_from_the_same_producer():
    opener = Opener()
    cache = HandleCache(opener)
    cache.get("p1", None, b"old", 0)
    cache.get("p1", None, b"new", 0)  # freed and allocated again: a new handle
    cache.get("p2", None, b"old", 0)  # another producer's bytes may collide: keyed apart
    cache.get("p1", None, b"old", 1)  # the same segment opened for another device index
    assert len(opener.opened) == 4


def test_least_recently_used_entries_go_first():
    opener = Opener()
    cache = HandleCache(opener, max_entries=2)
    cache.get("p", None, b"a", 0)
    cache.get("p", None, b"b", 0)
    cache.get("p", None, b"a", 0)  # a is now the most recent
    cache.get("p", None, b"c", 0)  # evicts b
    assert len(cache) == 2
    cache.get("p", None, b"a", 0)
    cache.get("p", None, b"b", 0)  # b was evicted: opened again
    assert [h for h, _ in opener.opened] == [b"a", b"b", b"c", b"b"]


def test_entries_of_an_exited_producer_are_dropped_with_a_clear_error(monkeypatch):
    alive = {100: True}
    monkeypatch.setattr(handle_cache, "pid_alive", lambda pid: alive.get(pid, False))
    cache = HandleCache(Opener())
    cache.get("p", 100, b"a", 0)
    cache.get("q", 100, b"b", 0)
    alive[100] = False
    assert cache.get("p", 100, b"a", 0) is not None  # a hit: the transport checks liveness per message
    with pytest.raises(ProcessLookupError, match="producer process 100 has exited: its GPU memory is gone"):
        cache.get("p", 100, b"new", 0)
    assert all(k[0] != "p" for k in cache.entries)
    assert cache.forget("q") == 1 and len(cache) == 0


def test_threads_share_one_cache():
    opener = Opener()
    cache = HandleCache(opener, max_entries=8)
    errors = []

    def work(i):
        try:
            for n in range(200):
                cache.get("p", None, bytes([n % 8]), 0)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 8 and cache.hits + cache.misses == 800
