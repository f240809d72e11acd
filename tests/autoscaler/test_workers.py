"""The forecast pool's workers run below the serving process's priority."""

from __future__ import annotations

import gc
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from autoscaler.app.serving import settle_heap
from autoscaler.refresh.workers import cgroup_cpu_limit, default_workers, forecast_pool, usable_cpus


def _scheduling() -> tuple[int, int]:
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.skipif(sys.platform != "linux", reason="SCHED_IDLE is Linux's")
def test_workers_run_under_sched_idle_and_the_server_does_not() -> None:
    pool = forecast_pool(1)
    try:
        policy, _ = pool.submit(_scheduling).result(timeout=60)
    finally:
        pool.shutdown()
    assert policy == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


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
