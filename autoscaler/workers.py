"""The process pool forecasts are fitted in."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

# Workers yield the CPU to the serving process: on a 2-core pod a refresh would otherwise take the
# cores the API answers on, and HPA requests would wait behind model fitting.
WORKER_NICENESS = 10


def _lower_priority() -> None:
    os.nice(WORKER_NICENESS)


def forecast_pool(workers: int) -> ProcessPoolExecutor:
    # "spawn": forked children of a process with live threads and sockets are unsafe.
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=_lower_priority)
