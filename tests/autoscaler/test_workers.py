"""The forecast pool's workers run below the serving process's priority."""

from __future__ import annotations

import os
import sys

import pytest

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
