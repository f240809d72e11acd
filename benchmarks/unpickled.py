"""What a pickled object costs once unpickled: the memory a process holds for it."""

from __future__ import annotations

import pickle
import tracemalloc


def unpickled_bytes(pickled: bytes) -> int:
    """What unpickling ``pickled`` allocates (``tracemalloc``: Python's allocations, NumPy's included)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        copy = pickle.loads(pickled)  # noqa: S301 (what this process pickled a moment ago)
        allocated = tracemalloc.get_traced_memory()[0] - before
        del copy
        return allocated
    finally:
        tracemalloc.stop()
