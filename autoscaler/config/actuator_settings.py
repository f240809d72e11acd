"""Settings of the actuators: what the service writes to the cluster itself (``actuators`` section).

The CapacityBuffer writer (``actuation.writer``) sizes one SIG Autoscaling ``CapacityBuffer`` per pool from
a served metric; docs/capacity-buffers.md explains the design.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from autoscaler.config.server_settings import STRICT, LeaseTimings
from autoscaler.quantity import Count
from autoscaler.selectors import SelectorError, validate_key, validate_value

# RFC 1123 subdomain (object names) and label (namespaces), as kube-apiserver checks them.
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _check_name(value: str, what: str, pattern: re.Pattern[str], longest: int) -> None:
    if len(value) > longest or not pattern.match(value):
        raise ValueError(
            f"{what} {value!r} is not a valid Kubernetes name (lowercase letters, digits, '-', at most {longest})"
        )


class _Strict(BaseModel):
    model_config = STRICT


class TolerationSettings(_Strict):
    """One toleration of the chunk's PodTemplate (core/v1 Toleration, snake_case)."""

    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""

    @model_validator(mode="after")
    def _consistent(self) -> TolerationSettings:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without key must use operator Exists")
        return self

    def as_kubernetes(self) -> dict[str, str]:
        fields = {"key": self.key, "operator": self.operator, "value": self.value, "effect": self.effect}
        return {name: value for name, value in fields.items() if value}


class BufferPoolSettings(_Strict):
    """One pool's CapacityBuffer: where it lives, the chunk it counts in, and the metric that sizes it."""

    pool: str = Field(min_length=1)
    namespace: str
    # The CapacityBuffer; created if absent, adopted (only spec.replicas written) if present.
    name: str
    # The PodTemplate of one chunk; created if absent (never changed when present).
    pod_template: str | None = None
    gpus_per_chunk: Count = Field(ge=1, le=1024)
    gpu_resource: str = "nvidia.com/gpu"
    # The served metric and the labels of its series that size this buffer (defaults: gpu_headroom,
    # {nodepool: <pool>}).
    metric: str = "gpu_headroom"
    labels: dict[str, str] | None = None
    node_selector: dict[str, str] = {}
    tolerations: tuple[TolerationSettings, ...] = ()

    @model_validator(mode="after")
    def _names_are_valid(self) -> BufferPoolSettings:
        _check_name(self.namespace, "namespace", _LABEL, 63)
        _check_name(self.name, "name", _SUBDOMAIN, 253)
        _check_name(self.template_name, "pod_template", _SUBDOMAIN, 253)
        try:
            for key, value in {**self.series_labels, **self.node_selector}.items():
                validate_key(key)
                validate_value(value)
        except SelectorError as error:
            raise ValueError(str(error)) from None
        return self

    @property
    def template_name(self) -> str:
        return self.pod_template or f"{self.name}-chunk"

    @property
    def series_labels(self) -> dict[str, str]:
        return dict(self.labels) if self.labels is not None else {"nodepool": self.pool}


class LeaseSettings(LeaseTimings):
    """The Lease only whose holder writes (one for all pools until ownership is sharded)."""

    name: str = "gpu-autoscaler-actuator"
    # None: the service's own namespace (POD_NAMESPACE, else the service account's namespace file).
    namespace: str | None = None

    @model_validator(mode="after")
    def _names_valid(self) -> LeaseSettings:
        _check_name(self.name, "lease name", _SUBDOMAIN, 253)
        if self.namespace is not None:
            _check_name(self.namespace, "lease namespace", _LABEL, 63)
        return self


class CapacityBufferSettings(_Strict):
    # Compute, show and export what would be written; write nothing (try it on a live cluster first).
    dry_run: bool = False
    pools: tuple[BufferPoolSettings, ...] = ()
    lease: LeaseSettings = LeaseSettings()
    # A write refused with 409 Conflict is retried from a fresh read, at most this many times in a row.
    conflict_retries: Count = Field(default=3, ge=0, le=20)

    @model_validator(mode="after")
    def _unique(self) -> CapacityBufferSettings:
        if not self.pools:
            raise ValueError("pools must name at least one pool (or leave capacity_buffers out)")
        for what, keys in (
            ("pool", [p.pool for p in self.pools]),
            ("buffer", [f"{p.namespace}/{p.name}" for p in self.pools]),
        ):
            repeated = sorted({key for key in keys if keys.count(key) > 1})
            if repeated:
                raise ValueError(f"each {what} may have one CapacityBuffer; repeated: {', '.join(repeated)}")
        return self


class ActuatorSettings(_Strict):
    capacity_buffers: CapacityBufferSettings | None = None
