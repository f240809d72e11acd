"""The C allocator's share of the service's memory: at most two malloc arenas.

glibc gives each thread that allocates concurrently an arena of its own, up to eight per core, and
memory freed into one arena is reused only by allocations from that arena. In one replica serving
3,000 series, five threads' arenas held 16-41 MB each during the first selection
(``/proc/<pid>/smaps``; docs/benchmarks/failover.md, "Memory of one replica"). Two arenas keep
that to two heaps, at the price of threads sometimes waiting for each other's allocations.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# <malloc.h>: mallopt's parameter for the most arenas glibc makes.
M_ARENA_MAX = -8
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Have glibc make at most ``arenas`` malloc arenas from now on (those made already stay); False
    where the C library is not glibc (e.g. musl, macOS), which has no such setting."""
    if arenas < 1:
        raise ValueError(f"arenas must be at least 1, got {arenas}")
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        log.info("the C library has no mallopt: malloc arenas are left as they are")
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
