"""The forecast pool's workers: their priority, their deadlines in CPU time, their libraries' threads."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from autoscaler.app.serving import settle_heap
from autoscaler.refresh import workers
from autoscaler.refresh.workers import (
    ForecastPools,
    WorkFailed,
    cgroup_cpu_limit,
    deadline,
    default_workers,
    forecast_pool,
    process_cpu_seconds,
    usable_cpus,
)
from tests.eventually import eventually

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="SCHED_IDLE and /proc are Linux's")


def _scheduling(_: object = None) -> tuple[int, int]:
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)


@pytest.fixture
def one_worker() -> Iterator[ForecastPools]:
    pools = ForecastPools([forecast_pool(1)], new_pool=lambda: forecast_pool(1))
    yield pools
    pools.shutdown()


def _pid(pools: ForecastPools) -> int:
    (pid,) = pools.pools[0]._processes  # type: ignore[attr-defined]
    return int(pid)


@linux_only
async def test_workers_run_at_the_servers_priority_until_told_then_under_sched_idle(one_worker) -> None:
    # Under SCHED_IDLE beside two busy processes the first forecast never came: it runs like the server.
    assert await one_worker.run("key", _scheduling, None, 60.0) == (os.SCHED_OTHER, os.getpriority(os.PRIO_PROCESS, 0))
    one_worker.lower_priority()  # the first forecast is served
    policy, _ = await one_worker.run("key", _scheduling, None, 60.0)
    assert policy == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the server's is left alone


def _spin_under_deadline(cpu_s: float) -> float:
    """A fit that uses ``cpu_s`` of CPU under a 0.5 s CPU deadline; how long it took in wall time."""
    started = time.monotonic()
    with deadline(0.5):
        spun_from = time.process_time()
        while time.process_time() - spun_from < cpu_s:
            pass
    return time.monotonic() - started


async def _when_worker_has_used(pools: ForecastPools, cpu_s: float) -> None:
    pid = _pid(pools)
    start = process_cpu_seconds(pid)
    assert start is not None
    await eventually(
        lambda: (process_cpu_seconds(pid) or 0.0) - start >= cpu_s,
        message=f"worker {pid} has used {cpu_s} s of CPU",
        timeout=30.0,
        interval=0.01,
    )


@linux_only
async def test_a_fit_deadline_counts_the_workers_cpu_time_not_the_wall_time(one_worker, monkeypatch) -> None:
    """A worker kept off the CPU (here stopped; beside busy processes, starved) past its deadline
    finishes its fit once it runs again: neither it nor the server counts the time it did not run."""
    monkeypatch.setattr(workers, "STUCK_WORKER_GRACE_S", 0.2)  # the server's budget: 0.7 s of the worker's CPU
    await one_worker.run("key", _scheduling, None, 60.0)  # the worker is started (its imports take CPU)
    pid = _pid(one_worker)
    fit = asyncio.ensure_future(one_worker.run("key", _spin_under_deadline, 0.3, 0.5))
    await _when_worker_has_used(one_worker, 0.05)  # inside the fit
    os.kill(pid, signal.SIGSTOP)
    await asyncio.sleep(1.0)  # twice the fit's deadline, longer than the server's budget
    os.kill(pid, signal.SIGCONT)
    wall_s = await fit
    assert wall_s > 1.0  # it was stopped in the middle of the fit, and completed
    assert _pid(one_worker) == pid  # the worker was not replaced


def _spin_deaf_to_the_deadline(_: object) -> None:
    """A fit stuck in native code never sees the deadline's signal: blocked, it stands for that."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
    with deadline(0.1):
        while True:
            pass


@linux_only
async def test_a_worker_spinning_past_its_cpu_budget_is_replaced(one_worker, monkeypatch) -> None:
    monkeypatch.setattr(workers, "STUCK_WORKER_GRACE_S", 0.2)
    monkeypatch.setattr(workers, "CPU_POLL_S", 0.05)
    await one_worker.run("key", _scheduling, None, 60.0)
    stuck = _pid(one_worker)
    with pytest.raises(WorkFailed, match=r"TimeoutError: the worker used \d+ s of CPU on one call, over 0.3 s"):
        await one_worker.run("key", _spin_deaf_to_the_deadline, None, 0.1)
    await one_worker.run("key", _scheduling, None, 60.0)  # the replacement answers
    assert _pid(one_worker) != stuck


def test_settle_heap_puts_live_objects_out_of_the_collectors_reach() -> None:
    start_up_object: list[int] = []  # stands for a module, the settings, the apps (lists are tracked)

    def examined(item: object) -> bool:
        return any(candidate is item for candidate in gc.get_objects())

    assert examined(start_up_object)
    try:
        settle_heap()
        assert not examined(start_up_object)  # in the permanent generation: no collection walks it
        assert gc.get_freeze_count() > 0
        made_later: list[int] = []
        assert examined(made_later)  # later objects are collected as usual
    finally:
        gc.unfreeze()


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"cpu.max": "150000 100000\n"}, 1.5),  # cgroup v2, limits.cpu: 1500m
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),  # v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu.max": "garbage"}, None),
        ({}, None),
    ],
)
def test_cgroup_cpu_limit_reads_v1_and_v2(tmp_path, files, limit) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpu_limit(tmp_path) == limit


def test_one_cpu_is_left_to_the_api(tmp_path) -> None:
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert default_workers(tmp_path) == max(1, affinity - 1)
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs round up to 2: one worker
    assert usable_cpus(tmp_path) == min(affinity, 2)
    assert default_workers(tmp_path) == max(1, min(affinity, 2) - 1)
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU: still one worker
    assert default_workers(tmp_path) == 1


def _thread_pools() -> list[tuple[str, int]]:
    import numpy  # noqa: F401  loaded in the worker after its start: OpenBLAS
    import sklearn.ensemble  # noqa: F401  OpenMP
    from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

    return [(str(pool["internal_api"]), int(pool["num_threads"])) for pool in threadpool_info()]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: libraries start one thread anyway")
def test_workers_run_native_libraries_on_one_thread() -> None:
    plain = ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"))
    pool = forecast_pool(1)
    try:
        default = plain.submit(_thread_pools).result(timeout=120)
        limited = pool.submit(_thread_pools).result(timeout=120)
    finally:
        plain.shutdown()
        pool.shutdown()
    assert {api for api, _ in limited} >= {"openblas", "openmp"}
    assert max(threads for _, threads in default) > 1  # what a worker would otherwise run
    assert all(threads == 1 for _, threads in limited), limited
