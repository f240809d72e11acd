"""Shipped signal queries for the exporters a GPU cluster already runs.

- dcgm-exporter: ``DCGM_FI_DEV_GPU_UTIL`` (percent; not reported for MIG instances) and
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (0-1, works for MIG). The node is labelled ``Hostname`` by released
  exporters and ``hostname`` by newer ones; both are read and copied into ``node``.
- kube-state-metrics: GPUs requested by Pending or Running pods, and allocatable GPUs per node.
- A request-rate template for application counters.

Every preset can be split ``by`` labels. ``nodepool`` is special: it is joined in from
``kube_node_labels`` (Karpenter's ``karpenter.sh/nodepool`` label by default). kube-state-metrics only
exports node labels that are allowlisted (``--metric-labels-allowlist=nodes=[karpenter.sh/nodepool]``).
Series with no node or no nodepool label (Pending pods, for one) land in ``nodepool=""``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Literal

from adapters.promql import PerStep, SignalQuery, aggregate, check_duration, check_label_name, check_metric_name
from adapters.types import NODEPOOL_LABEL

# kube-state-metrics exports the karpenter.sh/nodepool node label under this name.
KSM_NODEPOOL_LABEL = "label_karpenter_sh_nodepool"
GPU_RESOURCE = "nvidia_com_gpu"
ONE_MINUTE = timedelta(minutes=1)
DCGM_HOST_LABELS = ("Hostname", "hostname")

Aggregation = Literal["avg", "sum", "max", "min"]


def gpu_utilization(
    *,
    by: Sequence[str] = ("node",),
    aggregation: Aggregation = "avg",
    step: timedelta = ONE_MINUTE,
    nodepool_label: str = KSM_NODEPOOL_LABEL,
    name: str = "gpu_utilization",
    per_step: PerStep = "last",
) -> SignalQuery:
    """DCGM GPU utilisation in percent, aggregated ``by`` (``node``, ``nodepool``, ``gpu``, ...)."""
    return _dcgm("DCGM_FI_DEV_GPU_UTIL", by, aggregation, step, nodepool_label, name, per_step)


def gpu_engine_active(
    *,
    by: Sequence[str] = ("node",),
    aggregation: Aggregation = "avg",
    step: timedelta = ONE_MINUTE,
    nodepool_label: str = KSM_NODEPOOL_LABEL,
    name: str = "gpu_engine_active",
    per_step: PerStep = "last",
) -> SignalQuery:
    """DCGM graphics-engine activity (0-1), the utilisation figure that MIG instances report."""
    return _dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", by, aggregation, step, nodepool_label, name, per_step)


def gpus_requested(
    *,
    by: Sequence[str] = (NODEPOOL_LABEL,),
    resource: str = GPU_RESOURCE,
    step: timedelta = ONE_MINUTE,
    nodepool_label: str = KSM_NODEPOOL_LABEL,
    name: str = "gpus_requested",
    per_step: PerStep = "peak",
) -> SignalQuery:
    """GPUs requested by Pending or Running pods; ``by`` is drawn from namespace, pod, node, nodepool.

    Each point is the step's peak by default: the nodes must have covered it, and a pod that came
    and went between two samples still needed a GPU.
    """
    _check_by(by, allowed=("namespace", "pod", "node", NODEPOOL_LABEL))
    # max by (...) collapses duplicates from kube-state-metrics replicas before anything is summed.
    requests = aggregate(
        "sum",
        ("namespace", "pod", "node"),
        aggregate(
            "max",
            ("namespace", "pod", "container", "node"),
            f"kube_pod_container_resource_requests{{resource={_quote(resource)}}}",
        ),
    )
    phase = aggregate("max", ("namespace", "pod"), 'kube_pod_status_phase{phase=~"Pending|Running"}')
    demand = f"{requests} * on (namespace, pod) group_left () ({phase} == 1)"
    return _grouped("sum", demand, by, step, nodepool_label, name, per_step)


def gpus_allocatable(
    *,
    by: Sequence[str] = (NODEPOOL_LABEL,),
    resource: str = GPU_RESOURCE,
    step: timedelta = ONE_MINUTE,
    nodepool_label: str = KSM_NODEPOOL_LABEL,
    name: str = "gpus_allocatable",
    per_step: PerStep = "last",
) -> SignalQuery:
    """Allocatable GPUs of the nodes; ``by`` is drawn from node and nodepool."""
    _check_by(by, allowed=("node", NODEPOOL_LABEL))
    capacity = aggregate("max", ("node",), f"kube_node_status_allocatable{{resource={_quote(resource)}}}")
    return _grouped("sum", capacity, by, step, nodepool_label, name, per_step)


def request_rate(
    metric: str,
    *,
    window: str = "5m",
    by: Sequence[str] = ("namespace", "service"),
    matchers: Mapping[str, str] | None = None,
    step: timedelta = ONE_MINUTE,
    name: str = "request_rate",
    per_step: PerStep = "last",
) -> SignalQuery:
    """Per-second rate of a request counter: ``sum by (by) (rate(metric{matchers}[window]))``."""
    selector = ", ".join(f"{check_label_name(label)}={_quote(value)}" for label, value in (matchers or {}).items())
    expression = f"rate({check_metric_name(metric)}{{{selector}}}[{check_duration(window)}])"
    return SignalQuery(
        name=name, promql=aggregate("sum", by, expression), step=step, split_by=tuple(by), per_step=per_step
    )


# Names for configuration files: ``preset: gpus_requested`` with the keyword arguments beside it.
PRESETS: Mapping[str, Callable[..., SignalQuery]] = {
    "gpu_utilization": gpu_utilization,
    "gpu_engine_active": gpu_engine_active,
    "gpus_requested": gpus_requested,
    "gpus_allocatable": gpus_allocatable,
    "request_rate": request_rate,
}


def with_nodepool(expression: str, nodepool_label: str = KSM_NODEPOOL_LABEL) -> str:
    """Add a ``nodepool`` label to every series of ``expression`` by joining its ``node`` label.

    Series whose node is unknown to kube_node_labels (or that have no node) are kept, without nodepool.
    """
    nodepools = aggregate(
        "max",
        ("node", NODEPOOL_LABEL),
        f'label_replace(kube_node_labels, "{NODEPOOL_LABEL}", "$1", "{check_label_name(nodepool_label)}", "(.*)")',
    )
    joined = f"({expression}) * on (node) group_left ({NODEPOOL_LABEL}) {nodepools}"
    # ``or ignoring (nodepool)`` adds back the series the join found no node for.
    return f"{joined} or ignoring ({NODEPOOL_LABEL}) ({expression})"


def _dcgm(
    metric: str,
    by: Sequence[str],
    aggregation: Aggregation,
    step: timedelta,
    nodepool_label: str,
    name: str,
    per_step: PerStep,
) -> SignalQuery:
    per_host = [f'label_replace({metric}{{{host}!=""}}, "node", "$1", "{host}", "(.*)")' for host in DCGM_HOST_LABELS]
    # ``or`` de-duplicates a series that carries both host labels (same label set on both sides).
    return _grouped(aggregation, " or ".join(per_host), by, step, nodepool_label, name, per_step)


def _grouped(
    aggregation: Aggregation,
    expression: str,
    by: Sequence[str],
    step: timedelta,
    nodepool_label: str,
    name: str,
    per_step: PerStep,
) -> SignalQuery:
    if aggregation not in ("avg", "sum", "max", "min"):
        raise ValueError(f"unknown aggregation {aggregation!r}")
    if NODEPOOL_LABEL in by:
        expression = with_nodepool(expression, nodepool_label)
    promql = aggregate(aggregation, by, expression)
    return SignalQuery(name=name, promql=promql, step=step, split_by=tuple(by), per_step=per_step)


def _check_by(by: Sequence[str], allowed: Sequence[str]) -> None:
    unknown = [label for label in by if label not in allowed]
    if unknown:
        raise ValueError(f"cannot split by {unknown}: this preset has only {list(allowed)}")


def _quote(value: str) -> str:
    # PromQL string literals follow Go's quoting, which JSON string escaping satisfies.
    return json.dumps(value, ensure_ascii=False)
