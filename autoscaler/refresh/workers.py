"""The process pools forecasts are fitted in, and the deadline a fit runs under."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import multiprocessing
import os
import signal
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import BrokenExecutor, Executor, ProcessPoolExecutor
from multiprocessing.connection import wait
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from types import FrameType
from typing import TypeVar

from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

# Once the first forecast is served, workers yield the CPU to the serving process: on a 2-core pod a
# refresh would otherwise take the cores the API answers on, and HPA requests would wait behind model
# fitting. A niced worker still holds a core until the scheduler's next tick when the server wakes;
# SCHED_IDLE (Linux) makes the waking server preempt it at once. Elsewhere, or if refused, a plain
# nice value is the fallback. Until then they run at the server's priority: SCHED_IDLE runs only
# when a core has nothing else to run, and beside two busy processes on 2 cores the demo's first
# forecast did not come in 600 s (8 s idle). Priority is lowered once and for good: an unprivileged
# process cannot raise it again.
WORKER_NICENESS = 10
# How much of its own CPU time past its deadline a worker that did not stop itself may use before
# the service declares it stuck and replaces it.
STUCK_WORKER_GRACE_S = 30.0
# A worker that uses no CPU at all (hung, or starved by other processes) is replaced after this many
# times its CPU budget in wall time: loose, as other processes may take the CPU for long.
STUCK_WORKER_WALL_FACTOR = 10
# How often the service reads a busy worker's CPU time.
CPU_POLL_S = 1.0

log = logging.getLogger(__name__)
Request = TypeVar("Request")
Result = TypeVar("Result")


class FitTimeout(BaseException):
    """A fit ran past its deadline and was interrupted inside the worker.

    A BaseException, like KeyboardInterrupt: the engine drops a *failing* model with ``except
    Exception`` and goes on to the next, but a deadline must end the whole fit.
    """


def single_threaded_libraries() -> None:
    """One thread for OpenBLAS / OpenMP in this process, for good.

    Each worker fits one series at a time; numpy's BLAS and scikit-learn's OpenMP otherwise start a
    thread per core, and on 2 cores two workers' spinning threads made statsmodels' ETS fit 5x
    slower and a whole selection 1.6x slower than alone (1.2x with one thread each).
    """
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = "1"  # libraries loaded later (a spawned worker) read these at load
    ThreadpoolController().limit(limits=1)  # those already loaded (a forked one); kept, not a context


def exit_with_parent() -> None:
    """End this worker process when the process that started it dies.

    A server killed with SIGKILL (an OOM kill, a node's kubelet outside a container's PID namespace, a
    test) cannot shut its pool down, and its workers would live on as orphans holding their memory.
    The parent's sentinel becomes ready when the parent exits, however it exits.
    """
    parent = multiprocessing.parent_process()
    if parent is None:  # not started by multiprocessing: nobody to outlive
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    # The fit deadline's SIGPROF is process-directed: the kernel may hand it to any thread that does
    # not block it, and one taken by this thread (asleep in poll) did not interrupt the fit in time.
    # Threads inherit the mask, so the watcher is started with SIGPROF blocked.
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
    try:
        threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


def start_simulation_worker() -> None:
    """A simulator worker: one BLAS thread, gone with its parent."""
    single_threaded_libraries()
    exit_with_parent()


class _SigintIgnoringProcess(SpawnProcess):
    """A worker that ignores SIGINT from its first instruction: Ctrl-C in a terminal reaches the whole
    process group, and the server, not its workers, decides what it means (it shuts the pool down).

    An ignored signal stays ignored across exec, and Python leaves an ignored SIGINT alone at start,
    so the parent ignores it for the instant of the spawn (a signal disposition is only changed from
    the main thread; elsewhere the worker's initializer ignores it, after its imports).
    """

    def start(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            super().start()
            return
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            super().start()
        finally:
            signal.signal(signal.SIGINT, previous)


class _WorkerContext(SpawnContext):
    Process = _SigintIgnoringProcess


# Per process: whether this is a forecast worker (only those lower their priority: a thread pool in
# tests runs the work in the test process) and whether it has lowered it already.
_PRIORITY = {"forecast_worker": False, "lowered": False}


def _start_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    single_threaded_libraries()
    _PRIORITY["forecast_worker"] = True
    exit_with_parent()


def _run_at_priority(work: Callable[[Request], Result], request: Request, lowered: bool) -> Result:
    """``work(request)`` in a worker, which first lowers its priority, once, when asked to."""
    if lowered and _PRIORITY["forecast_worker"] and not _PRIORITY["lowered"]:
        _lower_priority()
        _PRIORITY["lowered"] = True
    return work(request)


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


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU limit of this process's cgroup (a pod's ``limits.cpu``), or None when there is none.

    cgroup v2 keeps it in ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD"), v1 in ``cpu.cfs_quota_us``
    (-1 for none) over ``cpu.cfs_period_us``.
    """
    try:
        quota_text, period_text = (root / "cpu.max").read_text().split()[:2]
        return None if quota_text == "max" else int(quota_text) / int(period_text)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def usable_cpus(root: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may use: its affinity, lowered to the cgroup's CPU limit when one is set."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit(root)
    return max(1, min(cpus, math.ceil(limit))) if limit is not None else cpus


def default_workers(root: Path = Path("/sys/fs/cgroup")) -> int:
    """One CPU is left to the API: fitting on every core raised the API's p99 2.5-2.9x during a
    selection on 2 cores, one worker kept it within 1.8x. Between selections refreshes forecast
    from held models, so one worker fewer mostly lengthens the (6-hourly) selection."""
    return max(1, usable_cpus(root) - 1)


def forecast_pool(workers: int) -> ProcessPoolExecutor:
    # "spawn": forked children of a process with live threads and sockets are unsafe.
    return ProcessPoolExecutor(max_workers=workers, mp_context=_WorkerContext(), initializer=_start_worker)


def forecast_pools(workers: int) -> list[ProcessPoolExecutor]:
    """One single-process pool per worker, so a series always reaches the worker holding its models."""
    return [forecast_pool(1) for _ in range(workers)]


def process_cpu_seconds(pid: int) -> float | None:
    """CPU time (user and system) process ``pid`` has used, from Linux's /proc; None elsewhere or
    when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise FitTimeout in the block after ``seconds`` of this process's CPU time.

    CPU time, not wall time: a fit's deadline must not expire because other processes took the CPU
    (two busy processes beside a worker on 2 cores left it no time at all). The worker enforces its
    own deadline so that a slow fit ends there and the worker is free for the next series; waiting
    for it from the service would leave the worker busy. Only the main thread of a process can take
    signals: elsewhere (a thread pool, in tests) this does nothing.
    """
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    message = f"the fit took longer than {seconds:g} s"
    fired = False

    def interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal fired
        fired = True
        raise FitTimeout(message)

    previous = signal.signal(signal.SIGPROF, interrupt)
    signal.setitimer(signal.ITIMER_PROF, seconds)  # counts the process's user and system time
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    if fired:  # the interrupt was caught inside the fit (a library's bare except): the deadline still holds
        raise FitTimeout(message)


def terminate(pool: Executor) -> None:
    """Stop a pool now, killing workers that are still busy (a stuck or broken pool is replaced)."""
    processes = list(getattr(pool, "_processes", None) or {})  # ProcessPoolExecutor's, by pid
    pool.shutdown(wait=False, cancel_futures=True)
    # Python 3.14 adds ProcessPoolExecutor.terminate_workers(); until then the pids are the way.
    for pid in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class WorkFailed(Exception):
    """A worker could not do one piece of work: the fit failed, ran out of time, or the pool broke."""


class ForecastPools:
    """Single-process pools, one per shard: a series always reaches the worker holding its models.

    One piece of work runs per worker at a time, so a deadline bounds a fit's own run time, not its
    wait in a queue behind a thousand others. A pool that breaks (a worker killed, e.g. by the OOM
    killer) or stops answering is replaced, and the next call uses the new one.
    """

    def __init__(self, pools: Sequence[Executor], new_pool: Callable[[], Executor] | None = None) -> None:
        if not pools:
            raise ValueError("at least one worker pool is needed")
        self.pools = list(pools)
        self.new_pool = new_pool
        self._slots = [asyncio.Semaphore(1) for _ in self.pools]
        self.lowered = False

    def lower_priority(self) -> None:
        """From the next piece of work on, each worker runs below the server's priority, for good
        (called once the first forecast is served: until then nothing else needs the CPU more)."""
        self.lowered = True

    def shard_of(self, key: object) -> int:
        return zlib.crc32(repr(key).encode()) % len(self.pools)

    async def run(self, key: object, work: Callable[[Request], Result], request: Request, timeout_s: float) -> Result:
        """``work(request)`` in the shard of ``key``; raises :class:`WorkFailed` naming the cause."""
        shard = self.shard_of(key)
        async with self._slots[shard]:
            pool = self.pools[shard]
            try:
                call = asyncio.get_running_loop().run_in_executor(pool, _run_at_priority, work, request, self.lowered)
                return await _within_budget(call, pool, timeout_s + STUCK_WORKER_GRACE_S)
            except (BrokenExecutor, TimeoutError) as error:
                self._replace(shard, pool, f"{type(error).__name__}: {error}")
                raise WorkFailed(f"{type(error).__name__}: {error}") from error
            except (Exception, FitTimeout) as error:  # a failing fit must not take the service down
                raise WorkFailed(f"{type(error).__name__}: {error}") from error

    def _replace(self, shard: int, broken: Executor, reason: str) -> None:
        """Swap in a fresh pool once per broken one (every call in flight on it fails the same way)."""
        if self.pools[shard] is not broken or self.new_pool is None:
            return
        log.warning("forecast worker %d replaced after %s", shard, reason)
        terminate(broken)
        self.pools[shard] = self.new_pool()

    def shutdown(self) -> None:
        """Stop every pool now: a fit still running is of no use to a server that is stopping, and
        waiting for it (Python joins the pools' threads at exit) would hold the exit for its length."""
        for pool in self.pools:
            terminate(pool)


async def _within_budget(call: asyncio.Future[Result], pool: Executor, cpu_budget_s: float) -> Result:
    """The call's result, or TimeoutError once its worker spent ``cpu_budget_s`` of its own CPU time
    on it (it did not stop itself: stuck in native code) or used none for ``STUCK_WORKER_WALL_FACTOR``
    times that (hung). Where a worker's CPU time cannot be read (a thread pool; not Linux), the
    budget is wall time."""
    pids = list(getattr(pool, "_processes", None) or {})  # started by the submit: one per pool
    started_cpu = process_cpu_seconds(pids[0]) if len(pids) == 1 else None
    wall_budget = cpu_budget_s if started_cpu is None else cpu_budget_s * STUCK_WORKER_WALL_FACTOR
    loop = asyncio.get_running_loop()
    wall_end = loop.time() + wall_budget
    try:
        while (remaining := wall_end - loop.time()) > 0:
            done, _ = await asyncio.wait(
                {call}, timeout=remaining if started_cpu is None else min(remaining, CPU_POLL_S)
            )
            if done:
                return call.result()
            cpu = process_cpu_seconds(pids[0]) if started_cpu is not None else None
            if cpu is not None and started_cpu is not None and cpu - started_cpu > cpu_budget_s:
                raise TimeoutError(
                    f"the worker used {cpu - started_cpu:.0f} s of CPU on one call, over {cpu_budget_s:g} s"
                )
        raise TimeoutError(f"no answer from the worker in {wall_budget:g} s")
    finally:
        call.cancel()  # a no-op once done; else the call was abandoned (cancelled, or past its budget)


def process_pools(workers: int) -> ForecastPools:
    """The service's pools: ``workers`` single-process pools, each replaced by a fresh one when broken."""
    return ForecastPools(forecast_pools(workers), new_pool=lambda: forecast_pool(1))
