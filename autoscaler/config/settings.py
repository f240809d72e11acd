"""Service settings: what each section of the YAML file may hold, validated at start-up.

``settings_loader`` reads the file and the environment overrides into :class:`Settings`.
"""

from __future__ import annotations

import inspect
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from adapters.prometheus import presets
from adapters.prometheus.presets import Aggregation
from adapters.prometheus.promql import PerStep
from adapters.types import AdapterError
from autoscaler.config.actuator_settings import ActuatorSettings
from autoscaler.config.gpu_unit_settings import ResourceClaimSettings, pod_gpu_units, pod_pool_label
from autoscaler.config.launch_settings import LaunchRecordSettings
from autoscaler.config.preflight_settings import PreflightSettings
from autoscaler.config.prometheus_settings import PrometheusSettings
from autoscaler.config.publication_settings import PublicationSettings
from autoscaler.config.server_settings import STRICT, Duration, ServerSettings
from autoscaler.config.target_settings import TargetSettings
from autoscaler.defaults import DEFAULT_LEAD_TIME
from autoscaler.policy import PlanKind
from autoscaler.quantity import Count, Number
from autoscaler.selectors import SelectorError, parse_selector, validate_key, validate_value
from autoscaler.serving.provider import FallbackMode


class _Strict(BaseModel):
    model_config = STRICT


class AuthSettings(_Strict):
    """How callers are authenticated and authorised (docs/kubernetes.md, "Authentication and authorisation")."""

    # kubernetes: request-header config from the extension-apiserver-authentication ConfigMap,
    #   TokenReview for bearer tokens, SubjectAccessReview for authorisation.
    # files: CAs and allowed names from the fields below.
    # none: no authentication at all; refused unless bound to a loopback address.
    mode: Literal["kubernetes", "files", "none"] = "kubernetes"
    requestheader_client_ca_file: Path | None = None
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_headers_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    client_ca_file: Path | None = None
    # In "files" mode: ask the Kubernetes API (SubjectAccessReview) or allow any authenticated caller.
    authorization: Literal["kubernetes", "allow-authenticated"] = "kubernetes"
    authorization_cache_ttl: Duration = timedelta(seconds=10)
    token_cache_ttl: Duration = timedelta(seconds=10)

    @model_validator(mode="after")
    def _files_need_a_ca(self) -> AuthSettings:
        if self.mode == "files" and self.requestheader_client_ca_file is None and self.client_ca_file is None:
            raise ValueError("mode 'files' needs requestheader_client_ca_file or client_ca_file")
        return self


class KubernetesSettings(_Strict):
    # Empty: in-cluster configuration, else the kubeconfig at this path.
    kubeconfig: Path | None = None
    request_timeout: Duration = timedelta(seconds=10)
    # Watches reconnect with exponential backoff between these bounds.
    backoff_initial: Duration = timedelta(seconds=1)
    backoff_max: Duration = timedelta(seconds=60)


class SeriesSettings(_Strict):
    """One served series: a metric name with its labels and, optionally, a namespace it belongs to."""

    labels: dict[str, str] = {}
    namespace: str | None = None

    @model_validator(mode="after")
    def _labels_are_valid(self) -> SeriesSettings:
        for key, value in self.labels.items():
            try:
                validate_key(key)
                validate_value(value)
            except SelectorError as error:
                raise ValueError(str(error)) from None
        return self


SignalPreset = Literal["gpus_requested", "gpus_allocatable", "gpu_utilization", "gpu_engine_active", "request_rate"]
_METRIC_NAME = r"^[a-z][a-z0-9_]{0,62}$"


class SignalSettings(_Strict):
    """A named series to pull: a shipped preset or a PromQL query of your own."""

    name: str = Field(pattern=_METRIC_NAME)
    preset: SignalPreset | None = None
    query: str | None = None
    step: Duration = timedelta(minutes=5)
    # Labels that identify a series (and become the served metric's labels); presets have defaults.
    by: tuple[str, ...] | None = None
    # request_rate preset: the counter, its rate window and label matchers.
    metric: str | None = None
    window: str = "5m"
    matchers: dict[str, str] = {}
    # What each point holds: the value at its time (last) or the highest during its step (peak).
    # Presets choose when unset: gpus_requested peak, the others last; a custom query last.
    per_step: PerStep | None = None
    # PromQL that has a series while the signal's exporter is alive: true, the preset's own (none for a
    # custom query); false, none. A pull while it has none counts as failed, and only while it has one
    # is a known series that is missing served as 0 (gpus_* presets).
    liveness: str | bool = True
    # How series are combined within a `by` group (presets; gpus_* sum, DCGM avg, request_rate sum).
    aggregation: Aggregation | None = None
    # gpus_*: whole-GPU resource(s) (other vendors' too), whether MIG instances count (by compute
    # slices), time-sliced resources with the device plugin's replicas (adapters/gpu_units.py).
    resource: str | tuple[str, ...] | None = None
    mig: bool | None = None
    time_slicing: dict[str, Annotated[Count, Field(ge=1)]] = {}
    # gpus_requested: namespaces whose pods are left out (the placeholders', for one).
    exclude_namespaces: tuple[str, ...] = ()
    # Presets split by nodepool: the kube_node_labels label that names a node's pool.
    nodepool_label: str | None = None
    # gpus_requested: read each pod's GPUs from the shipped recording rule (docs/configuration.md).
    recorded: bool | None = None

    @model_validator(mode="after")
    def _preset_or_query(self) -> SignalSettings:
        if (self.preset is None) == (self.query is None):
            raise ValueError("give exactly one of preset and query")
        if self.preset == "request_rate" and not self.metric:
            raise ValueError("preset request_rate needs metric (the request counter's name)")
        if self.step < timedelta(seconds=1) or self.step.total_seconds() % 1:
            raise ValueError("step must be a whole number of seconds, at least 1s")
        if self.liveness == "":
            raise ValueError("liveness must be PromQL, true (the preset's own) or false (none)")
        options = self.preset_options()
        if self.preset is None:
            if set(options) - {"per_step", "liveness"}:
                raise ValueError(f"a custom query takes no preset options ({', '.join(sorted(options))})")
            return self
        factory = presets.PRESETS[self.preset]
        unknown = sorted(set(options) - set(inspect.signature(factory).parameters))
        if unknown:
            raise ValueError(f"preset {self.preset} does not take {', '.join(unknown)}")
        arguments = (self.metric,) if self.preset == "request_rate" else ()
        factory(*arguments, **options)  # its ValueError names what is wrong
        return self

    def preset_options(self) -> dict[str, Any]:
        """The preset's keyword arguments this signal sets; unset fields keep the preset's defaults."""
        fields = ("per_step", "aggregation", "resource", "mig", "nodepool_label", "recorded")
        options: dict[str, Any] = {name: getattr(self, name) for name in fields if getattr(self, name) is not None}
        if self.by is not None and self.preset is not None:
            options["by"] = self.by
        if self.time_slicing:
            options["time_slicing"] = dict(self.time_slicing)
        if self.exclude_namespaces:
            options["exclude_namespaces"] = self.exclude_namespaces
        if self.liveness is not True:
            options["liveness"] = self.liveness or None
        if self.preset == "request_rate":
            options |= {"window": self.window, "matchers": dict(self.matchers)}
        return options


class MetricSettings(_Strict):
    """One served external metric, made from one signal."""

    signal: str
    # demand: upper-quantile forecast over the lead time plus scheduled windows;
    # headroom: demand minus what is requested now (for placeholder pods);
    # rate: upper-quantile forecast over the lead time (for inference HPAs);
    # replicas: the rate forecast divided by one replica's capacity, learned from history.
    kind: PlanKind
    quantile: Number = Field(default=0.9, gt=0.5, lt=1.0)
    description: str = ""
    # After staleness_ttl without a successful pull: keep serving the last value (hold), serve
    # fallback_value (static), or answer 503 so the HPA keeps its replicas (error).
    fallback: FallbackMode = "hold"
    fallback_value: Number | None = None
    staleness_ttl: Duration = timedelta(minutes=15)
    min_value: Number | None = None
    max_value: Number | None = None
    # Falls are paced to at most this much per minute (rises pass at once); null: no pacing.
    max_decrease_per_minute: Number | None = Field(default=None, gt=0)
    # headroom: the namespace of the placeholder pods, whose ResourceQuota requests.nvidia.com/gpu
    # caps the value; NodePool limits cap it too when the series has a nodepool label.
    placeholder_namespace: str | None = None
    # replicas: per-service GPU utilisation (%) and replica count signals, matched by labels.
    utilization_signal: str | None = None
    replicas_signal: str | None = None
    target_utilization: Number = Field(default=60.0, gt=0, le=100)
    # headroom: a service level to meet instead of a fixed quantile.
    target: TargetSettings | None = None

    @model_validator(mode="after")
    def _consistent(self) -> MetricSettings:
        if self.target is not None and (self.kind != "headroom" or "quantile" in self.model_fields_set):
            raise ValueError("target: a service-level target takes the place of quantile, on headroom metrics only")
        if self.fallback == "static" and self.fallback_value is None:
            raise ValueError("fallback 'static' needs fallback_value")
        if self.kind == "replicas" and (self.utilization_signal is None or self.replicas_signal is None):
            raise ValueError("kind 'replicas' needs utilization_signal and replicas_signal")
        if self.min_value is not None and self.max_value is not None and self.min_value > self.max_value:
            raise ValueError("min_value must not exceed max_value")
        return self


class ForecastSettings(_Strict):
    lookback: Duration = timedelta(days=14)
    interval: Duration = timedelta(minutes=1)
    reselect_every: Duration = timedelta(hours=6)
    # Between selections the fitted models forecast from the newest data at every refresh; set this
    # to also refit them (without reselecting) on a shorter cadence.
    refit_every: Duration | None = None
    # In the worker's own CPU time: time other processes take the CPU is not counted.
    fit_timeout: Duration = timedelta(seconds=60)
    # None: one less than the CPUs the process may use (its cgroup limit), at least 1.
    workers: Count | None = Field(default=None, ge=1, le=64)
    # Used when Karpenter's NodeClaims have not taught the service a lead time yet.
    default_lead_time: Duration = DEFAULT_LEAD_TIME
    lead_time_quantile: Number = Field(default=0.9, gt=0, le=1)
    # Fewer samples than this never lower the lead time below the default (docs/launch-outcomes.md).
    lead_time_min_samples: Count = Field(default=3, ge=1)
    # Covers what follows a forecast before a node is asked for: up to one refresh interval, the
    # HPA's 15 s sync and scale-up ramp, and Karpenter's batching (the simulator shows 30 s is short).
    lead_time_margin: Duration = timedelta(seconds=90)


class WindowSettings(_Strict):
    """Training that does not run as a CronJob, declared by hand."""

    name: str
    cron: str
    timezone: str = "UTC"
    gpus: Number = Field(gt=0)
    duration: Duration
    namespace: str = ""
    labels: dict[str, str] = {}

    @model_validator(mode="after")
    def _schedule_is_valid(self) -> WindowSettings:
        from adapters.kubernetes.cron_schedule import (
            fire_times,  # the same rules as CronJobs, so a window reads the same
        )

        start = datetime(2026, 1, 1, tzinfo=UTC)
        try:
            fire_times(self.cron, self.timezone, start, start + timedelta(days=8), limit=100_000)
        except (ValueError, AdapterError) as error:
            raise ValueError(str(error)) from None
        return self


class KubernetesInputsSettings(_Strict):
    """What the service learns from the Kubernetes API."""

    cronjobs: bool = True
    nodeclaims: bool = True
    # Only CronJobs with these labels count (empty: every CronJob that requests GPUs).
    cronjob_labels: dict[str, str] = {}
    default_job_duration: Duration = timedelta(hours=1)
    window_horizon: Duration = timedelta(hours=24)
    # Watch Karpenter NodePools, so that pods and CronJob templates resolve to the pool Karpenter
    # would launch their nodes in (by selector, affinity, taints, weight and limits).
    nodepools: bool = True
    # Watch Pending pods: the GPUs of those waiting for a node count in their pool's requested-now.
    pending_pods: bool = True
    # Placeholder pods (never demand): by namespace, or by a label selector ("app=gpu-placeholder").
    placeholder_namespaces: tuple[str, ...] = ()
    placeholder_selector: str = ""
    resource_claims: ResourceClaimSettings = ResourceClaimSettings()  # DRA claims of those pods
    # Watch Kueue's Workloads, queues and flavors (where Kueue is installed): the GPUs of admitted
    # Workloads without pods, and of pending ones next in line within their quota, count as demand.
    kueue: bool = True
    launches: LaunchRecordSettings = LaunchRecordSettings()  # the launch record of NodeClaims

    @model_validator(mode="after")
    def _placeholder_selector_parses(self) -> KubernetesInputsSettings:
        try:
            parse_selector(self.placeholder_selector)
        except SelectorError as error:
            raise ValueError(f"placeholder_selector: {error}") from None
        return self


class DemoSettings(_Strict):
    enabled: bool = False
    # Simulated minutes per real second: 1.0 replays the trace in real time.
    speed: Number = Field(default=1.0, gt=0, le=10_000)


class Settings(_Strict):
    server: ServerSettings = ServerSettings()
    auth: AuthSettings = AuthSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    demo: DemoSettings = DemoSettings()
    preflight: PreflightSettings = PreflightSettings()
    prometheus: PrometheusSettings | None = None
    signals: tuple[SignalSettings, ...] = ()
    metrics: dict[str, MetricSettings] = {}
    forecast: ForecastSettings = ForecastSettings()
    inputs: KubernetesInputsSettings | None = None
    windows: tuple[WindowSettings, ...] = ()
    actuators: ActuatorSettings = ActuatorSettings()
    state_dir: Path = Path(".gpu-autoscaler")
    publication: PublicationSettings = PublicationSettings()
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"

    @model_validator(mode="after")
    def _metrics_name_signals(self) -> Settings:
        names = [signal.name for signal in self.signals]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"signal names must be unique; repeated: {', '.join(duplicates)}")
        steps = {signal.name: signal.step for signal in self.signals}
        for metric, spec in self.metrics.items():
            if not re.match(_METRIC_NAME, metric):
                raise ValueError(f"metric name {metric!r} must be lowercase letters, digits and '_'")
            if spec.signal not in names:
                raise ValueError(
                    f"metrics.{metric}.signal {spec.signal!r} is not one of the signals ({', '.join(names) or 'none'})"
                )
            # A served value is as old as the newest point behind it: up to one step while all is well.
            if spec.staleness_ttl <= steps[spec.signal]:
                raise ValueError(
                    f"metrics.{metric}.staleness_ttl must be longer than the step of signal {spec.signal!r} "
                    f"({steps[spec.signal]}): a fresh value is up to one step old"
                )
        if self.signals and self.prometheus is None and not self.demo.enabled:
            raise ValueError("signals need a prometheus section (its url at least)")
        pod_gpu_units(self.signals)  # its ValueError names a resource the GPU signals count differently
        pod_pool_label(self.signals)  # and this one two pool labels
        return self

    @model_validator(mode="after")
    def _buffers_name_served_metrics(self) -> Settings:
        buffers = self.actuators.capacity_buffers
        if buffers is None:
            return self
        for index, pool in enumerate(buffers.pools):
            if not self.demo.enabled and pool.metric not in self.metrics:  # the demo serves its own metrics
                served = ", ".join(sorted(self.metrics)) or "none"
                raise ValueError(
                    f"actuators.capacity_buffers.pools[{index}].metric {pool.metric!r} is not a served metric "
                    f"({served})"
                )
        if self.demo.enabled and not buffers.dry_run:
            raise ValueError("actuators.capacity_buffers in demo mode needs dry_run: true (the demo has no cluster)")
        return self

    @model_validator(mode="after")
    def _publication_needs_the_api(self) -> Settings:
        publication = self.publication
        if publication.serve_from == "objects" and not publication.enabled:
            raise ValueError("publication.serve_from 'objects' needs publication.enabled: true")
        if publication.enabled and not publication.publish and publication.serve_from != "objects":
            raise ValueError("publication.publish false (a reading replica) needs publication.serve_from 'objects'")
        if publication.enabled and self.demo.enabled:
            raise ValueError("publication needs the Kubernetes API, which the demo does not use; disable one")
        return self

    @model_validator(mode="after")
    def _auth_none_only_on_loopback(self) -> Settings:
        if self.auth.mode == "none" and not self.server.is_loopback:
            raise ValueError(
                f"auth.mode 'none' is only allowed when server.bind_address is a loopback address; "
                f"it is {self.server.bind_address!r}"
            )
        return self
