"""At most two malloc arenas in the service: threads allocating at once share them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from autoscaler.app.allocator import limit_malloc_arenas

# Eight threads allocate at once, then glibc's malloc_info lists one <heap> per arena.
ARENAS_AFTER_THREADS = textwrap.dedent(
    """
    import ctypes, ctypes.util, sys, tempfile, threading
    from autoscaler.app.allocator import limit_malloc_arenas
    if sys.argv[1] == "limited":
        assert limit_malloc_arenas()
    barrier = threading.Barrier(8)
    kept = []
    def allocate():
        barrier.wait()
        kept.append([bytearray(100) for _ in range(20_000)])
    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.fclose.argtypes = (ctypes.c_void_p,)
    with tempfile.NamedTemporaryFile(suffix=".xml") as out:
        stream = libc.fopen(out.name.encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        print(open(out.name).read().count("<heap nr="))
    """
)


def _arenas(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", ARENAS_AFTER_THREADS, mode], capture_output=True, text=True, timeout=60, check=True
    )
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and malloc_info")
def test_threads_allocating_at_once_share_two_arenas_once_limited() -> None:
    assert _arenas("unlimited") > 2  # without the limit, threads get arenas of their own
    assert _arenas("limited") <= 2


def test_a_limit_below_one_arena_is_refused() -> None:
    with pytest.raises(ValueError, match="arenas must be at least 1, got 0"):
        limit_malloc_arenas(0)
