"""The forecast pool's workers run below the serving process's priority."""

from __future__ import annotations

import gc
import os
import sys

import pytest

from autoscaler.app import settle_heap
from autoscaler.workers import forecast_pool


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
