"""Known future GPU demand from CronJobs (and from windows declared in the config file).

Pure functions over raw CronJob and Job JSON (as the watches keep them) and an explicit ``now``.
Runs start at the schedule's fire times (``adapters.kubernetes.cron_schedule``, as the Kubernetes controller
computes them), each asks for its pods' GPUs (``adapters.kubernetes.gpu_requests``) and lasts as long as the
CronJob's recent successful Jobs did.

A window's labels are the CronJob's labels plus ``gpu_resource`` (the GPU resource names requested,
comma-joined, and ``resourceclaims`` when DRA claims add GPUs: ``adapters.kubernetes.dra_claims``) and
``nodepool``: the NodePool Karpenter would launch the template's pods in (``adapters.kubernetes.pool_matching``,
by selector, affinity, tolerations and the pool's whole limit), or, while the NodePools are not
known, the one a ``karpenter.sh/nodepool`` selector names.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import numpy as np
from kubernetes_asyncio.client import ApiClient, BatchV1Api

from adapters.gpu_units import GpuUnits
from adapters.kubernetes.client import parse_kube_time
from adapters.kubernetes.cron_schedule import CronScheduleError, fire_times
from adapters.kubernetes.dra_claims import ClaimLookup
from adapters.kubernetes.pod_templates import GpuTemplate, template_gpus
from adapters.kubernetes.pool_matching import NodePool, UnplacedDemand, launches_failing, pool_name
from adapters.kubernetes.watch import WatchedResource
from adapters.types import NODEPOOL_LABEL, ScheduledWindow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CronWindowSettings:
    horizon: timedelta = timedelta(hours=24)  # windows starting up to now + horizon
    default_duration: timedelta = timedelta(hours=1)  # when neither past Jobs nor a deadline tell
    duration_quantile: float = 0.9  # of the durations of past successful runs
    max_job_samples: int = 20  # the most recent successful runs only
    # Only CronJobs whose labels include all of these (a label selector's matchLabels).
    match_labels: Mapping[str, str] = field(default_factory=dict)
    # Kubernetes uses the controller-manager's zone when spec.timeZone is unset: UTC in practice.
    default_timezone: str = "UTC"
    max_windows_per_cronjob: int = 2000  # a guard against "* * * * *" over a long horizon
    # Which resources are GPUs and what each is worth: the GPU signal's own units.
    units: GpuUnits = field(default_factory=GpuUnits)


# ----------------------------------------------------------------------------- watches


def cronjob_resource(api: ApiClient, namespace: str | None = None) -> WatchedResource:
    batch = BatchV1Api(api)
    if namespace is None:
        return WatchedResource("cronjobs", batch.list_cron_job_for_all_namespaces)
    return WatchedResource(f"cronjobs/{namespace}", partial(batch.list_namespaced_cron_job, namespace))


def job_resource(api: ApiClient, namespace: str | None = None) -> WatchedResource:
    batch = BatchV1Api(api)
    if namespace is None:
        return WatchedResource("jobs", batch.list_job_for_all_namespaces)
    return WatchedResource(f"jobs/{namespace}", partial(batch.list_namespaced_job, namespace))


# ----------------------------------------------------------------------------- Jobs


def job_pods(job_spec: Mapping[str, Any]) -> int:
    """Pods a Job runs at once: parallelism (default 1), never more than completions."""
    parallelism = job_spec.get("parallelism")
    pods = 1 if parallelism is None else int(parallelism)
    completions = job_spec.get("completions")
    if completions is not None:
        pods = min(pods, int(completions))
    return max(0, pods)


# ----------------------------------------------------------------------------- durations


def _owned_by(job: Mapping[str, Any], cronjob: Mapping[str, Any]) -> bool:
    cron_meta = cronjob.get("metadata") or {}
    job_meta = job.get("metadata") or {}
    if job_meta.get("namespace") != cron_meta.get("namespace"):
        return False
    for owner in job_meta.get("ownerReferences") or []:
        if owner.get("kind") != "CronJob":
            continue
        if cron_meta.get("uid") and owner.get("uid"):
            if owner["uid"] == cron_meta["uid"]:
                return True
        elif owner.get("name") == cron_meta.get("name"):
            return True
    return False


def _succeeded(job: Mapping[str, Any]) -> bool:
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Complete" and condition.get("status") == "True":
            return True
    return bool(status.get("completionTime"))  # only set when a Job succeeds


def past_run_durations(cronjob: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]]) -> list[timedelta]:
    """Durations of the CronJob's successful Jobs, oldest first (startTime to completionTime)."""
    runs: list[tuple[datetime, timedelta]] = []
    for job in jobs:
        if not _owned_by(job, cronjob) or not _succeeded(job):
            continue
        status = job.get("status") or {}
        started = parse_kube_time(status.get("startTime"))
        completed = parse_kube_time(status.get("completionTime"))
        if started is not None and completed is not None and completed >= started:
            runs.append((started, completed - started))
    runs.sort(key=lambda run: run[0])
    return [duration for _, duration in runs]


def expected_duration(
    cronjob: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]], settings: CronWindowSettings
) -> tuple[timedelta, str]:
    """(duration, source): the quantile of recent successful runs ("jobs"), else the Job's
    activeDeadlineSeconds ("activeDeadlineSeconds", an upper bound), else the setting ("setting")."""
    recent = past_run_durations(cronjob, jobs)[-settings.max_job_samples :]
    if recent:
        seconds = [d.total_seconds() for d in recent]
        return timedelta(seconds=float(np.quantile(seconds, settings.duration_quantile))), "jobs"
    job_spec = ((cronjob.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}
    deadline = job_spec.get("activeDeadlineSeconds")
    if deadline:
        return timedelta(seconds=int(deadline)), "activeDeadlineSeconds"
    return settings.default_duration, "setting"


# ----------------------------------------------------------------------------- windows


def _selected(cronjob: Mapping[str, Any], match_labels: Mapping[str, str]) -> bool:
    labels = (cronjob.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in match_labels.items())


def _apply_concurrency_policy(
    starts: list[datetime], duration: timedelta, policy: str
) -> list[tuple[datetime, datetime]]:
    """Windows as the controller would run them: Forbid skips a run while the previous one runs,
    Replace stops the previous run when the next starts, Allow (default) lets them overlap."""
    windows: list[tuple[datetime, datetime]] = []
    for start in starts:
        end = start + duration
        if windows and start < windows[-1][1]:
            if policy == "Forbid":
                continue
            if policy == "Replace":
                windows[-1] = (windows[-1][0], start)
        windows.append((start, end))
    return windows


def gpu_template(
    cronjob: Mapping[str, Any], settings: CronWindowSettings, claims: ClaimLookup | None = None
) -> GpuTemplate | None:
    """The GPUs a CronJob's runs ask for; None when it is suspended, not selected, or asks for none.
    Raises ``CronScheduleError`` for a GPU request it cannot read. ``claims`` (None: DRA not
    watched): each pod's template claims count per pod, a claim named by the template once."""
    spec = cronjob.get("spec") or {}
    if spec.get("suspend") or not _selected(cronjob, settings.match_labels):
        return None
    job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    pod_spec = (job_spec.get("template") or {}).get("spec") or {}
    metadata = cronjob.get("metadata") or {}
    what = f"CronJob {metadata.get('namespace')}/{metadata.get('name')}"
    try:
        return template_gpus(pod_spec, str(metadata.get("namespace", "")), job_pods(job_spec), settings.units,
                             claims, what)  # fmt: skip
    except ValueError as exc:
        raise CronScheduleError(f"unreadable GPU request: {exc}") from exc


def windows_for_cronjob(
    cronjob: Mapping[str, Any],
    jobs: Iterable[Mapping[str, Any]],
    now: datetime,
    settings: CronWindowSettings,
    nodepools: Sequence[NodePool] | None = None,
    claims: ClaimLookup | None = None,
) -> list[ScheduledWindow]:
    """Windows open at ``now`` or starting before ``now + horizon`` for one CronJob.

    Empty when the CronJob is suspended, not selected, or requests no GPU. Raises
    ``CronScheduleError`` for a schedule or time zone it cannot evaluate. ``nodepools``: the
    cluster's NodePools (None while unknown), which decide the window's pool.
    """
    metadata = cronjob.get("metadata") or {}
    spec = cronjob.get("spec") or {}
    template = gpu_template(cronjob, settings, claims)
    if template is None:
        return []
    duration, duration_source = expected_duration(cronjob, jobs, settings)
    # A run that started up to one duration ago is still open now.
    starts = fire_times(
        str(spec.get("schedule", "")),
        spec.get("timeZone") or settings.default_timezone,
        now - duration,
        now + settings.horizon,
        limit=settings.max_windows_per_cronjob,
    )
    labels = dict(metadata.get("labels") or {})
    claimed = template.claimed or template.own_all or template.shared_all
    labels["gpu_resource"] = ",".join([*sorted(template.per_pod), *(["resourceclaims"] if claimed else [])])
    choice = template.pool(nodepools)
    failing = any(launches_failing(pool) for pool in nodepools or () if pool_name(pool) == choice.pool)
    if choice.pool is not None:
        labels[NODEPOOL_LABEL] = choice.pool
    gpus = template.run_gpus(choice.pool, claims)
    if gpus <= 0:
        return []
    policy = str(spec.get("concurrencyPolicy") or "Allow")
    return [
        ScheduledWindow(
            source="cronjob",
            namespace=str(metadata.get("namespace", "")),
            name=str(metadata.get("name", "")),
            start=start,
            end=end,
            gpus=float(gpus),
            labels=labels,
            duration_source=duration_source,
            # Said only when it was a choice: several pools fit, or none did (or the one keeps failing).
            placement=choice.reason if nodepools is not None and (len(choice.fits) != 1 or failing) else "",
        )
        for start, end in _apply_concurrency_policy(starts, duration, policy)
        if end > now
    ]


def cronjob_windows(
    cronjobs: Iterable[Mapping[str, Any]],
    jobs: Iterable[Mapping[str, Any]],
    now: datetime,
    settings: CronWindowSettings,
    nodepools: Sequence[NodePool] | None = None,
    claims: ClaimLookup | None = None,
) -> list[ScheduledWindow]:
    """Windows of every GPU CronJob, ordered by start; a CronJob that cannot be evaluated is logged
    and skipped so that it does not hide the others."""
    # Index Jobs by their CronJob owner once, instead of scanning every Job for every CronJob.
    by_owner: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for job in jobs:
        metadata = job.get("metadata") or {}
        for owner in metadata.get("ownerReferences") or []:
            if owner.get("kind") == "CronJob":
                key = (str(metadata.get("namespace", "")), str(owner.get("uid") or owner.get("name", "")))
                by_owner.setdefault(key, []).append(job)
    windows: list[ScheduledWindow] = []
    for cronjob in cronjobs:
        metadata = cronjob.get("metadata") or {}
        namespace = str(metadata.get("namespace", ""))
        owned = by_owner.get((namespace, str(metadata.get("uid", ""))), []) + by_owner.get(
            (namespace, str(metadata.get("name", ""))), []
        )
        try:
            windows.extend(windows_for_cronjob(cronjob, owned, now, settings, nodepools, claims))
        except CronScheduleError as exc:
            log.warning("CronJob %s/%s skipped: %s", metadata.get("namespace"), metadata.get("name"), exc)
    windows.sort(key=lambda w: (w.start, w.namespace, w.name))
    return windows


def unplaced_cronjobs(
    cronjobs: Iterable[Mapping[str, Any]],
    nodepools: Sequence[NodePool],
    settings: CronWindowSettings,
    claims: ClaimLookup | None = None,
) -> list[UnplacedDemand]:
    """GPU CronJobs whose pods would fit no NodePool: their windows land in no pool's series."""
    found: list[UnplacedDemand] = []
    for cronjob in cronjobs:
        try:
            template = gpu_template(cronjob, settings, claims)
        except CronScheduleError:
            continue  # cronjob_windows logs it
        choice = template.pool(nodepools) if template is not None else None
        if template is not None and choice is not None and choice.pool is None:
            metadata = cronjob.get("metadata") or {}
            namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
            found.append(UnplacedDemand("cronjob", namespace, name, template.gpus, choice.reason))
    return found


def config_windows(
    *,
    name: str,
    cron: str,
    timezone: str,
    gpus: float,
    duration: timedelta,
    now: datetime,
    horizon: timedelta,
    namespace: str = "",
    labels: Mapping[str, str] | None = None,
) -> list[ScheduledWindow]:
    """Windows declared in the config file, with the same fire-time rules as CronJobs."""
    if not math.isfinite(gpus) or gpus < 0:
        raise CronScheduleError(f"window {name!r}: gpus must be a finite number >= 0")
    if duration <= timedelta(0):
        raise CronScheduleError(f"window {name!r}: duration must be positive")
    return [
        ScheduledWindow(
            source="config",
            namespace=namespace,
            name=name,
            start=start,
            end=start + duration,
            gpus=float(gpus),
            labels=dict(labels or {}),
            duration_source="setting",
        )
        for start in fire_times(cron, timezone, now - duration, now + horizon)
        if start + duration > now
    ]
