"""What the service learns from the Kubernetes API: GPU training windows, node lead times, the
NodePools pods land in and the GPUs of pods waiting for a node.

Each resource kind is watched in its own task (a slow or broken watch never blocks another); the
refresher reads the caches, so nothing here is on the request path. While the NodePools are not
known (watch off, Karpenter absent, first list pending) a pod's pool is the one its
``karpenter.sh/nodepool`` selector names, and nothing is reported as fitting no pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from kubernetes_asyncio.client import ApiClient

from adapters.gpu_units import GpuUnits
from adapters.kubernetes import (
    cronjobs,
    dra_allocations,
    dra_claims,
    dra_devices,
    nodeclaims,
    pending_pods,
    pod_outcomes,
    resourcelimits,
)
from adapters.kubernetes.client import KubeError
from adapters.kubernetes.launch_record import LaunchRecord
from adapters.kubernetes.pool_matching import NodePool, UnplacedDemand, pool_name, with_observations
from adapters.kubernetes.watch import OnChange, WatchCache, WatchEvent, WatchGroup, WatchSettings
from adapters.types import NODEPOOL_LABEL, ScheduledWindow
from autoscaler.config.settings import ForecastSettings, KubernetesInputsSettings, KubernetesSettings, WindowSettings
from autoscaler.policy import Cap, LeadTime
from autoscaler.refresh.kueue_inputs import KueueInputs
from autoscaler.selectors import Selector, parse_selector
from autoscaler.targets.launches import LearnedLaunches, learned_launches

log = logging.getLogger(__name__)

SHOWN_UNPLACED = 5  # items named in the /readyz line; the metric and the page count them all


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
        units: GpuUnits | None = None,
    ) -> None:
        self.inputs = inputs
        self.forecast = forecast
        self.declared = list(declared)
        self.window_settings = cronjobs.CronWindowSettings(
            horizon=inputs.window_horizon,
            default_duration=inputs.default_job_duration,
            match_labels=dict(inputs.cronjob_labels),
            units=units or GpuUnits(),
        )
        self.lead_times = nodeclaims.LeadTimeHistory()
        self.launches = LaunchRecord(self.lead_times, inputs.launches.record())
        # Polled, not watched: a handful of objects that change rarely.
        self._nodepool_limits: dict[str, float | None] | None = None
        self._quotas: dict[str, list[resourcelimits.GpuQuota]] = {}
        self._limits_error: str | None = None
        self._cronjobs: WatchCache | None = None
        self._jobs: WatchCache | None = None
        self._nodeclaims: WatchCache | None = None
        self._nodepools: WatchCache | None = None
        self._pending: WatchCache | None = None
        self._claims: WatchCache | None = None
        self._claim_templates: WatchCache | None = None
        self._slices: WatchCache | None = None
        self._device_classes: WatchCache | None = None
        self._placeholder_labels: Selector | None = (
            parse_selector(inputs.placeholder_selector) if inputs.placeholder_selector.strip() else None
        )
        # The pending pods resolved to pools, and the watch positions they were resolved at.
        self._resolved: tuple[tuple[int | str, ...], list[pending_pods.PendingGpus]] = ((), [])
        self._dra_problems: tuple[str, ...] = ()  # last said, so each is logged once
        # Told of every change of a Pending pod (the live scorecard's waits and window starts).
        self.pod_listeners: list[OnChange] = []
        # Demand in Kueue's queues (docs/kueue.md), in the same units.
        self.kueue = KueueInputs(self.window_settings.units, inputs.default_job_duration) if inputs.kueue else None

    def start(self, group: WatchGroup, api: ApiClient) -> None:
        if self.inputs.cronjobs:
            self._cronjobs = group.start(cronjobs.cronjob_resource(api))
            self._jobs = group.start(cronjobs.job_resource(api))
        if self.inputs.nodeclaims:
            self._nodeclaims = group.start(nodeclaims.nodeclaim_resource(api), on_change=self.launches.on_change)
        if self.inputs.nodepools:
            self._nodepools = group.start(resourcelimits.nodepool_resource(api))
        if self.inputs.pending_pods:
            self._pending = group.start(pending_pods.pending_pod_resource(api), on_change=self._pod_changed)
        if self.inputs.resource_claims.enabled and (self.inputs.pending_pods or self.inputs.cronjobs):
            self._claims = group.start(dra_claims.resource_claim_resource(api))
            self._claim_templates = group.start(dra_claims.resource_claim_template_resource(api))
            self._slices = group.start(dra_devices.resource_slice_resource(api))
            self._device_classes = group.start(dra_devices.device_class_resource(api))
        if self.kueue is not None:
            self.kueue.jobs = self.job  # a JobSet's pods find its Workload through their Job (inputs.cronjobs)
            self.kueue.start(group, api)
            self.pod_listeners.append(self.kueue.on_pod_change)

    def claim_lookup(self) -> dra_claims.ClaimLookup | None:
        """The ResourceClaims and templates the watches hold (empty where resource.k8s.io/v1 is not
        served); None when they are not watched."""
        if self._claims is None or self._claim_templates is None:
            return None
        classes = dict(self.inputs.resource_claims.device_classes)
        devices = None
        if self._slices is not None and self._device_classes is not None:
            nodeclaims = self._nodeclaims.objects if self._nodeclaims is not None else {}
            devices = dra_devices.DeviceInventory(self._slices.objects, self._device_classes.objects, nodeclaims)
        return dra_claims.ClaimLookup(self._claims.objects, self._claim_templates.objects, classes, devices)

    def dra_gpus(self) -> dra_allocations.PoolGpus | None:
        """GPUs DRA devices hold and allocated claims use in each pool now (``dra_allocations``); None
        when ResourceClaims are not watched."""
        lookup = self.claim_lookup()
        if lookup is None:
            return None
        found = dra_allocations.pool_gpus(lookup, self.inputs.placeholder_namespaces)
        if found.problems != self._dra_problems:
            for problem in found.problems:
                log.warning("DRA devices not counted as GPUs held: %s", problem)
            self._dra_problems = found.problems
        return found

    def claimed_gpus(self) -> dict[str, float]:
        """GPUs allocated DRA claims use in each pool now (empty when claims are not watched)."""
        found = self.dra_gpus()
        return dict(found.used) if found is not None else {}

    def _pod_changed(self, cache: WatchCache, event: WatchEvent | None) -> None:
        for listener in self.pod_listeners:
            listener(cache, event)

    def nodepools(self) -> list[NodePool] | None:
        """The cluster's NodePools; None while they are not known (then selectors alone name pools).

        Each with what its NodeClaims taught (``pool_matching.with_observations``): its node sizes
        (and the configured ones) and whether its launches keep failing."""
        cache = self._nodepools
        if cache is None or cache.absent or not cache.synced:
            return None
        failing = self.launches.failing_pools()
        observed: list[NodePool] = []
        for nodepool in cache.objects.values():
            name = pool_name(nodepool)
            sizes = [*self.inputs.launches.sizes(name), *self.launches.node_sizes(name)]
            observed.append(with_observations(nodepool, sizes, failing.get(name)))
        return observed

    def nodepools_listing(self) -> bool:
        """Whether the NodePools are watched and not listed yet (until then, pools are not resolved fully)."""
        return self._nodepools is not None and not (self._nodepools.synced or self._nodepools.absent)

    def windows(self, start: datetime, horizon: timedelta) -> list[ScheduledWindow]:
        """Windows open at ``start`` or starting within ``horizon`` after it (past or future)."""
        found = declared_windows(self.declared, start, horizon)
        if self._cronjobs is not None and self._jobs is not None:
            settings = replace(self.window_settings, horizon=horizon)
            found += cronjobs.cronjob_windows(
                self._cronjobs.objects.values(),
                self._jobs.objects.values(),
                start,
                settings,
                self.nodepools(),
                self.claim_lookup(),
            )
        return found

    def queued(self, now: datetime) -> list[ScheduledWindow]:
        """GPUs of Kueue Workloads that have no pod yet, as windows open from ``now`` (``KueueInputs``)."""
        if self.kueue is None:
            return []
        pods = self._pending.objects.values() if self._pending is not None else ()
        return self.kueue.windows(now, self.kueue.queued(pods, self.nodepools(), self.claim_lookup()))

    def kueue_waiting(self) -> dict[str, float]:
        """GPUs of the Kueue Workloads waiting with no pod yet per pool, whatever their quota (none without Kueue)."""
        if self.kueue is None:
            return {}
        pods = self._pending.objects.values() if self._pending is not None else ()
        return self.kueue.waiting(pods, self.nodepools(), self.claim_lookup())

    def is_placeholder(self, pod: Mapping[str, Any]) -> bool:
        metadata = pod.get("metadata") or {}
        if metadata.get("namespace") in self.inputs.placeholder_namespaces:
            return True
        return self._placeholder_labels is not None and self._placeholder_labels.matches(metadata.get("labels") or {})

    def _pending_resolved(self) -> list[pending_pods.PendingGpus]:
        """The waiting pods with their pools, resolved again only when a watch has moved on."""
        if self._pending is None:
            return []
        watched = (self._pending, self._nodepools, self._nodeclaims, self._claims, self._claim_templates, self._slices)
        caches = [cache for cache in watched if cache is not None]
        position: tuple[int | str, ...] = tuple(
            n for cache in caches for n in (cache.events, cache.relists, int(cache.absent))
        )
        position += tuple(sorted(self.launches.failing_pools()))  # a pool stops failing as time passes
        if position != self._resolved[0]:
            found = pending_pods.pending_gpus(
                self._pending.objects.values(),
                self.nodepools(),
                self.is_placeholder,
                self.window_settings.units,
                self.claim_lookup(),
            )
            self._resolved = (position, found)
        return self._resolved[1]

    def pending_gpus(self, pool: str | None) -> float:
        """GPUs of pods waiting for a node that Karpenter would place in ``pool``; ``""``: those that fit
        no pool (or name none while NodePools are unknown); None: what the signal's pool-less series
        holds of all of them, their extended resources (kube-state-metrics exports no DRA claim), so
        the refresher moves out of it only what is in it. Placeholders never count."""
        waiting = self._pending_resolved()
        if pool is None:
            return sum(pod.gpus - pod.claimed for pod in waiting)
        return sum(pod.gpus for pod in waiting if (pod.choice.pool or "") == pool)

    def short_gpus(self) -> dict[str, float]:
        """GPUs of pods waiting for capacity (``PodScheduled=False``, ``Unschedulable``) per pool they wait
        for (``""``: none fits), resolved as ``pending_gpus`` resolves them; placeholders never count."""
        if self._pending is None:
            return {}
        waiting = [pod for pod in self._pending.objects.values() if pod_outcomes.waits_for_capacity(pod)]
        short: dict[str, float] = {}
        for pod in pending_pods.pending_gpus(
            waiting, self.nodepools(), self.is_placeholder, self.window_settings.units, self.claim_lookup()
        ):
            short[pod.choice.pool or ""] = short.get(pod.choice.pool or "", 0.0) + pod.gpus
        return short

    def pod_gpus_and_pool(self, pod: Mapping[str, Any]) -> tuple[float, str] | None:
        """A pod's GPUs and the pool it waited for (resolved as if it still waited); None for a pod
        without GPUs or a placeholder."""
        spec = {key: value for key, value in (pod.get("spec") or {}).items() if key != "nodeName"}
        waiting = {**pod, "spec": spec, "status": {"phase": "Pending"}}
        found = pending_pods.pending_gpus(
            [waiting], self.nodepools(), self.is_placeholder, self.window_settings.units, self.claim_lookup()
        )
        return (found[0].gpus, found[0].choice.pool or "") if found else None

    def job(self, key: str) -> Mapping[str, Any] | None:
        """The Job ``namespace/name`` as the Job watch holds it (None: unknown, or the watch is off)."""
        return self._jobs.objects.get(key) if self._jobs is not None else None

    def pending_placement(self, pool: str) -> str:
        """Which of the pods counted in ``pool`` had a choice (several pools fit) and why this one."""
        chosen = [pod for pod in self._pending_resolved() if pod.choice.pool == pool and len(pod.choice.fits) > 1]
        listed = "; ".join(f"{pod.namespace}/{pod.name}: {pod.choice.reason}" for pod in chosen[:SHOWN_UNPLACED])
        return listed + (f"; and {len(chosen) - SHOWN_UNPLACED} more" if len(chosen) > SHOWN_UNPLACED else "")

    def unplaced(self) -> list[UnplacedDemand]:
        """GPU demand that fits no NodePool: waiting pods, CronJob templates and queued Kueue Workloads
        (only known once the NodePools are)."""
        pools = self.nodepools()
        if pools is None:
            return []
        found = pending_pods.unplaced(self._pending_resolved())
        if self._cronjobs is not None:
            cronjob_objects = self._cronjobs.objects.values()
            found += cronjobs.unplaced_cronjobs(cronjob_objects, pools, self.window_settings, self.claim_lookup())
        if self.kueue is not None:
            pods = self._pending.objects.values() if self._pending is not None else ()
            queued = self.kueue.queued(pods, pools, self.claim_lookup())
            found += [UnplacedDemand("workload", q.namespace, q.name, q.gpus, q.choice.reason) for q in queued
                      if q.choice.pool is None]  # fmt: skip
        return found

    def lead_time(self, labels: Mapping[str, str]) -> LeadTime:
        """The lead time for a series: learned from its node pool's NodeClaims (retries included),
        else the default. Fewer than ``lead_time_min_samples`` samples never lower it below the
        default: one fast NodeClaim does not set it (docs/launch-outcomes.md)."""
        default = self.forecast.default_lead_time
        if self._nodeclaims is None:
            return LeadTime(default, "configured default (NodeClaim watch off)")
        pool = labels.get(NODEPOOL_LABEL) or None
        estimate = self.lead_times.estimate(pool, self.forecast.lead_time_quantile, absent=self._nodeclaims.absent)
        if estimate.status == "learned" and estimate.seconds is not None:
            margin = self.forecast.lead_time_margin
            quantile = round(self.forecast.lead_time_quantile * 100)
            if estimate.samples >= self.forecast.lead_time_min_samples:
                source = f"p{quantile} of {estimate.samples} NodeClaim launches of pool {pool or 'any'} plus margin"
                return LeadTime(timedelta(seconds=estimate.seconds) + margin, source)
            slowest = timedelta(seconds=max(s.seconds for s in self.lead_times.samples(pool))) + margin
            few = f"{estimate.samples} NodeClaim launch{'es' if estimate.samples > 1 else ''} of pool {pool or 'any'}"
            if slowest > default:
                return LeadTime(
                    slowest, f"the slowest of {few} plus margin (fewer than {self.forecast.lead_time_min_samples})"
                )
            return LeadTime(default, f"configured default (only {few}, none slower)")
        reason = "Karpenter absent" if estimate.status == "absent" else "no NodeClaim has become ready yet"
        return LeadTime(default, f"configured default ({reason})")

    def learned_launches(self, pool: str) -> LearnedLaunches | None:
        """What the pool's NodeClaims taught a target's replay (its lead times, retries included, and
        its share of failed launches; "" pools them all, as :meth:`lead_time` does). None with the
        watch off or fewer than ``lead_time_min_samples`` lead times: one fast NodeClaim does not set
        the pool replayed either."""
        if self._nodeclaims is None:
            return None
        name = pool or None
        samples = self.lead_times.samples(name)
        if len(samples) < self.forecast.lead_time_min_samples:
            return None
        records = [launches for key, launches in self.launches.pools.items() if name is None or key == name]
        failed = sum(sum(launches.failures.values()) for launches in records)
        ready = sum(sum(launches.ready.values()) for launches in records)
        return learned_launches([sample.seconds for sample in samples], failed, ready)

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
        watched = (self._cronjobs, self._jobs, self._nodeclaims, self._nodepools, self._pending, self._claims)
        for cache in (*watched, self._claim_templates, self._slices, self._device_classes):
            if cache is None:
                continue
            state = "absent" if cache.absent else ("synced" if cache.synced else "syncing")
            checks[f"watch {cache.kind}"] = state + (f" (last error: {cache.last_error})" if cache.last_error else "")
        checks |= self.kueue.health() if self.kueue is not None else {}
        unplaced = self.unplaced()
        if unplaced:
            gpus = sum(item.gpus for item in unplaced)
            listed = "; ".join(str(item) for item in unplaced[:SHOWN_UNPLACED])
            more = f"; and {len(unplaced) - SHOWN_UNPLACED} more" if len(unplaced) > SHOWN_UNPLACED else ""
            checks["unplaced gpu demand"] = f"warning: {gpus:g} GPUs fit no NodePool: {listed}{more}"
        return checks


def watch_settings(settings: KubernetesSettings) -> WatchSettings:
    return WatchSettings(
        backoff_initial_s=settings.backoff_initial.total_seconds(),
        backoff_max_s=settings.backoff_max.total_seconds(),
    )
