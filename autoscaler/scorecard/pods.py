"""Capacity waits and window start delays, read from the Pending-pod watch as pods leave it.

A pod scheduled while still Pending, or leaving Pending (the watch's DELETED event carries it as it
is then, Running), tells when it was scheduled: its capacity wait is recorded once. A pod of a Job
that a CronJob made tells when it started running; once as many of the run's pods run as the Job
wants, the run's start delay (``scorecard.window_start_delay``) is recorded.

The listener runs on the watch's task: it is quick, bounded (``MAX_TRACKED`` pods and runs), and a
malformed pod costs a logged warning naming it and the field, never the watch.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from adapters.kubernetes import pod_outcomes
from adapters.kubernetes.watch import WatchCache, WatchEvent
from autoscaler.scorecard.figures import window_start_delay

log = logging.getLogger(__name__)

MAX_TRACKED = 50_000
Outcome = Literal["capacity_wait", "window_start_delay"]
# (pool, what, at (s since the epoch), seconds)
Record = Callable[[str, Outcome, float, float], None]
# A pod -> its GPUs and the pool it waited for; None: no GPUs, or a placeholder.
PodPool = Callable[[Mapping[str, Any]], "tuple[float, str] | None"]
JobLookup = Callable[[str], "Mapping[str, Any] | None"]


@dataclass
class _Run:
    pool: str
    running: dict[str, float] = field(default_factory=dict)  # pod uid -> when it started running


class PodOutcomes:
    def __init__(self, *, pod_pool: PodPool, job: JobLookup, record: Record) -> None:
        self.pod_pool = pod_pool
        self.job = job
        self.record = record
        self.waited: OrderedDict[str, None] = OrderedDict()  # pods whose wait is recorded
        self.runs: OrderedDict[str, _Run] = OrderedDict()  # runs not yet all running
        self.started: OrderedDict[str, None] = OrderedDict()  # runs whose delay is recorded

    def on_change(self, cache: WatchCache, event: WatchEvent | None) -> None:
        pods = cache.objects.values() if event is None else (event.object,)
        for pod in pods:
            try:
                self.observe(pod)
            except (ValueError, TypeError, AttributeError) as error:
                metadata = pod.get("metadata") or {}
                log.warning(
                    "scorecard: pod %s/%s: %s; its wait and start are not counted",
                    metadata.get("namespace"), metadata.get("name"), error,
                )  # fmt: skip

    def observe(self, pod: Mapping[str, Any]) -> None:
        key = pod_outcomes.uid(pod)
        if key in self.waited and pod_outcomes.owning_job(pod) is None:
            return
        gpus_pool = self.pod_pool(pod)
        if gpus_pool is None:
            return
        pool = gpus_pool[1]
        wait = pod_outcomes.capacity_wait_s(pod)
        scheduled = pod_outcomes.scheduled_at(pod)
        if wait is not None and scheduled is not None and key not in self.waited:
            _remember(self.waited, key)
            self.record(pool, "capacity_wait", scheduled, wait)
        self._window_run(pod, key, pool)

    def _window_run(self, pod: Mapping[str, Any], key: str, pool: str) -> None:
        job_key = pod_outcomes.owning_job(pod)
        running = pod_outcomes.running_at(pod)
        if job_key is None or running is None or job_key in self.started:
            return
        job = self.job(job_key)
        run = pod_outcomes.cronjob_run(job) if job is not None else None
        if run is None:
            return
        scheduled, wanted = run
        state = self.runs.setdefault(job_key, _Run(pool))
        state.running[key] = running
        while len(self.runs) > MAX_TRACKED:
            self.runs.popitem(last=False)
        if len(state.running) >= wanted:
            del self.runs[job_key]
            _remember(self.started, job_key)
            delay = window_start_delay(scheduled, np.array(list(state.running.values())))
            self.record(state.pool, "window_start_delay", scheduled, delay)

    def document(self) -> dict[str, Any]:
        return {"waited": list(self.waited), "started": list(self.started)}

    def restore(self, document: Mapping[str, Any]) -> None:
        for name, keys in (("waited", self.waited), ("started", self.started)):
            values = document.get(name, [])
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ValueError(f"{name}: not a list of strings")
            for value in values[-MAX_TRACKED:]:
                _remember(keys, value)


def _remember(keys: OrderedDict[str, None], key: str) -> None:
    keys[key] = None
    while len(keys) > MAX_TRACKED:
        keys.popitem(last=False)
