"""The process pool forecasts are fitted in, and the deadline a fit runs under."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing import get_context
from types import FrameType

# Workers yield the CPU to the serving process: on a 2-core pod a refresh would otherwise take the
# cores the API answers on, and HPA requests would wait behind model fitting. A niced worker still
# holds a core until the scheduler's next tick when the server wakes; SCHED_IDLE (Linux) makes the
# waking server preempt it at once. Elsewhere, or if refused, a plain nice value is the fallback.
WORKER_NICENESS = 10


class FitTimeout(BaseException):
    """A fit ran past its deadline and was interrupted inside the worker.

    A BaseException, like KeyboardInterrupt: the engine drops a *failing* model with ``except
    Exception`` and goes on to the next, but a deadline must end the whole fit.
    """


def _lower_priority() -> None:
    idle_policy = getattr(os, "SCHED_IDLE", None)
    if idle_policy is not None:
        try:
            os.sched_setscheduler(0, idle_policy, os.sched_param(0))
        except OSError:
            pass  # e.g. a seccomp profile without sched_setscheduler: niceness alone still helps
        else:
            return
    os.nice(WORKER_NICENESS)


def forecast_pool(workers: int) -> ProcessPoolExecutor:
    # "spawn": forked children of a process with live threads and sockets are unsafe.
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=_lower_priority)


def forecast_pools(workers: int) -> list[ProcessPoolExecutor]:
    """One single-process pool per worker, so a series always reaches the worker holding its models."""
    return [forecast_pool(1) for _ in range(workers)]


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise FitTimeout in the block after ``seconds`` of wall time.

    The worker enforces its own deadline so that a slow fit ends there and the worker is free for
    the next series; waiting for it from the service would leave the worker busy. Only the main
    thread of a process can take signals: elsewhere (a thread pool, in tests) this does nothing.
    """
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise FitTimeout(f"the fit took longer than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def terminate(pool: Executor) -> None:
    """Stop a pool now, killing workers that are still busy (a stuck or broken pool is replaced)."""
    processes = list(getattr(pool, "_processes", None) or {})  # ProcessPoolExecutor's, by pid
    pool.shutdown(wait=False, cancel_futures=True)
    # Python 3.14 adds ProcessPoolExecutor.terminate_workers(); until then the pids are the way.
    for pid in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
