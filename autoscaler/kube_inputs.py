"""What the service learns from the Kubernetes API: GPU training windows and node lead times.

Each resource kind is watched in its own task (a slow or broken watch never blocks another); the
refresher reads the caches, so nothing here is on the request path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from kubernetes_asyncio.client import ApiClient

from adapters import cronjobs, nodeclaims, resourcelimits
from adapters.kube_client import KubeError
from adapters.kube_watch import WatchCache, WatchGroup, WatchSettings
from adapters.types import NODEPOOL_LABEL, ScheduledWindow
from autoscaler.policy import Cap, LeadTime
from autoscaler.settings import ForecastSettings, KubernetesInputsSettings, KubernetesSettings, WindowSettings

log = logging.getLogger(__name__)


def declared_windows(windows: Sequence[WindowSettings], now: datetime, horizon: timedelta) -> list[ScheduledWindow]:
    found: list[ScheduledWindow] = []
    for window in windows:
        found += cronjobs.config_windows(
            name=window.name,
            cron=window.cron,
            timezone=window.timezone,
            gpus=window.gpus,
            duration=window.duration,
            now=now,
            horizon=horizon,
            namespace=window.namespace,
            labels=window.labels,
        )
    return found


class KubernetesInputs:
    def __init__(
        self,
        *,
        inputs: KubernetesInputsSettings,
        forecast: ForecastSettings,
        declared: Sequence[WindowSettings] = (),
        time_slicing: Mapping[str, int] | None = None,
    ) -> None:
        self.inputs = inputs
        self.forecast = forecast
        self.declared = list(declared)
        self.window_settings = cronjobs.CronWindowSettings(
            horizon=inputs.window_horizon,
            default_duration=inputs.default_job_duration,
            match_labels=dict(inputs.cronjob_labels),
            time_slicing=dict(time_slicing or {}),
        )
        self.lead_times = nodeclaims.LeadTimeHistory()
        # Polled, not watched: a handful of objects that change rarely.
        self._nodepool_limits: dict[str, float | None] | None = None
        self._quotas: dict[str, list[resourcelimits.GpuQuota]] = {}
        self._limits_error: str | None = None
        self._cronjobs: WatchCache | None = None
        self._jobs: WatchCache | None = None
        self._nodeclaims: WatchCache | None = None

    def start(self, group: WatchGroup, api: ApiClient) -> None:
        if self.inputs.cronjobs:
            self._cronjobs = group.start(cronjobs.cronjob_resource(api))
            self._jobs = group.start(cronjobs.job_resource(api))
        if self.inputs.nodeclaims:
            self._nodeclaims = group.start(nodeclaims.nodeclaim_resource(api), on_change=self.lead_times.on_change)

    def windows(self, start: datetime, horizon: timedelta) -> list[ScheduledWindow]:
        """Windows open at ``start`` or starting within ``horizon`` after it (past or future)."""
        found = declared_windows(self.declared, start, horizon)
        if self._cronjobs is not None and self._jobs is not None:
            settings = replace(self.window_settings, horizon=horizon)
            found += cronjobs.cronjob_windows(
                self._cronjobs.objects.values(), self._jobs.objects.values(), start, settings
            )
        return found

    def lead_time(self, labels: Mapping[str, str]) -> LeadTime:
        """The lead time for a series: learned from its node pool's NodeClaims, else the default."""
        default = self.forecast.default_lead_time
        if self._nodeclaims is None:
            return LeadTime(default, "configured default (NodeClaim watch off)")
        pool = labels.get(NODEPOOL_LABEL) or None
        estimate = self.lead_times.estimate(pool, self.forecast.lead_time_quantile, absent=self._nodeclaims.absent)
        if estimate.status == "learned" and estimate.seconds is not None:
            value = timedelta(seconds=estimate.seconds) + self.forecast.lead_time_margin
            quantile = round(self.forecast.lead_time_quantile * 100)
            return LeadTime(
                value, f"p{quantile} of {estimate.samples} NodeClaim launches of pool {pool or 'any'} plus margin"
            )
        reason = "Karpenter absent" if estimate.status == "absent" else "no NodeClaim has become ready yet"
        return LeadTime(default, f"configured default ({reason})")

    async def poll_limits(self, api: ApiClient, namespaces: Sequence[str], interval: timedelta) -> None:
        """Keep NodePool GPU limits and placeholder ResourceQuotas fresh; a failed read keeps the last."""
        while True:
            try:
                self._nodepool_limits = await resourcelimits.read_nodepool_gpu_limits(api)
                for namespace in namespaces:
                    self._quotas[namespace] = await resourcelimits.read_gpu_quotas(api, namespace)
                self._limits_error = None
            except KubeError as error:
                self._limits_error = str(error)
                log.warning("reading GPU limits failed, keeping the last ones: %s", error)
            await asyncio.sleep(interval.total_seconds())

    def caps(self, namespace: str | None, labels: Mapping[str, str], requested_now: float) -> list[Cap]:
        """What bounds the placeholder GPUs of a series: its namespace's quota and its pool's limit."""
        caps: list[Cap] = []
        quotas = [q for q in self._quotas.get(namespace or "", []) if q.resource == resourcelimits.QUOTA_GPU_KEY]
        tightest = min((q for q in quotas if q.hard is not None), key=lambda q: q.hard or 0.0, default=None)
        if tightest is not None and tightest.hard is not None:
            reason = f"ResourceQuota {tightest.namespace}/{tightest.name} ({tightest.resource} hard {tightest.hard:g})"
            caps.append(Cap(tightest.hard, reason))
        pool = labels.get(NODEPOOL_LABEL)
        limit = (self._nodepool_limits or {}).get(pool) if pool else None
        if limit is not None:
            caps.append(
                Cap(limit - requested_now, f"NodePool {pool} limit {limit:g} GPUs minus {requested_now:g} requested")
            )
        return caps

    def health(self) -> dict[str, str]:
        checks: dict[str, str] = {}
        if self._limits_error is not None:
            checks["gpu limits"] = f"failing: {self._limits_error}"
        for name, cache in (("cronjobs", self._cronjobs), ("jobs", self._jobs), ("nodeclaims", self._nodeclaims)):
            if cache is None:
                continue
            state = "absent" if cache.absent else ("synced" if cache.synced else "syncing")
            checks[f"watch {name}"] = state + (f" (last error: {cache.last_error})" if cache.last_error else "")
        return checks


def watch_settings(settings: KubernetesSettings) -> WatchSettings:
    return WatchSettings(
        backoff_initial_s=settings.backoff_initial.total_seconds(),
        backoff_max_s=settings.backoff_max.total_seconds(),
    )
