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

GPU units (``gpus_requested``, ``gpus_allocatable``): kube-state-metrics exports each extended
resource under its own name, so whole GPUs, MIG instances and time-sliced replicas are separate
series. These presets add them up in physical GPUs as ``adapters.gpu_units.GpuUnits`` defines them,
the definition the pod-spec path (Pending pods, CronJob windows) counts with too: each ``resource``
(one name or several: ``[nvidia.com/gpu, amd.com/gpu]``) counts 1; a MIG instance
``nvidia.com/mig-<N>g.<memory>gb`` its compute slices over the GPU's, unless ``mig=False``; a resource
named in ``time_slicing`` 1/replicas (the device plugin's ``replicas``).

Liveness: each preset names how its exporter shows it is alive (``SignalQuery.liveness``, which
``liveness=None`` switches off): kube-state-metrics by ``kube_node_info`` or its ``up`` series,
dcgm-exporter by any sample of its utilisation metric, a request counter by any of its series. The
GPU counts are ``zero_when_absent``; split by ``nodepool`` alone they also name the pools that
``kube_node_labels`` knows (``SignalQuery.pools``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Literal

from adapters.gpu_units import (
    A30_MIG_PROFILES,
    A30_SLICES,
    FULL_GPU_SLICE_COUNTS,
    FULL_GPU_SLICES,
    MIG_PREFIX,
    WHOLE_GPU,
    GpuUnits,
)
from adapters.prometheus.promql import (
    PerStep,
    SignalQuery,
    aggregate,
    check_duration,
    check_label_name,
    check_metric_name,
)
from adapters.types import NODEPOOL_LABEL

# kube-state-metrics exports the karpenter.sh/nodepool node label under this name.
KSM_NODEPOOL_LABEL = "label_karpenter_sh_nodepool"
GPU_RESOURCE = WHOLE_GPU
ONE_MINUTE = timedelta(minutes=1)
DCGM_HOST_LABELS = ("Hostname", "hostname")
DCGM_UTILIZATION = "DCGM_FI_DEV_GPU_UTIL"
DCGM_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
# kube-state-metrics is alive while it reports a node, or while Prometheus scrapes it successfully
# (the job name kube-prometheus-stack and the upstream manifests give it).
KSM_LIVENESS = 'kube_node_info or up{job="kube-state-metrics"} == 1'
# The label that carries each GPU resource's share of a physical GPU inside ``gpu_units``.
_SHARE = "gpu_share"
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

Aggregation = Literal["avg", "sum", "max", "min"]


def gpu_utilization(
    *,
    by: Sequence[str] = ("node",),
    aggregation: Aggregation = "avg",
    step: timedelta = ONE_MINUTE,
    nodepool_label: str = KSM_NODEPOOL_LABEL,
    name: str = "gpu_utilization",
    per_step: PerStep = "last",
    liveness: str | None = DCGM_UTILIZATION,
) -> SignalQuery:
    """DCGM GPU utilisation in percent, aggregated ``by`` (``node``, ``nodepool``, ``gpu``, ...)."""
    expression = _dcgm(DCGM_UTILIZATION)
    return _grouped(aggregation, expression, by, step, nodepool_label, name, per_step, liveness)


def gpu_engine_active(
    *,
    by: Sequence[str] = ("node",),
    aggregation: Aggregation = "avg",
    step: timedelta = ONE_MINUTE,
    nodepool_label: str = KSM_NODEPOOL_LABEL,
    name: str = "gpu_engine_active",
    per_step: PerStep = "last",
    liveness: str | None = f"{DCGM_ENGINE_ACTIVE} or {DCGM_UTILIZATION}",
) -> SignalQuery:
    """DCGM graphics-engine activity (0-1), the utilisation figure that MIG instances report."""
    expression = _dcgm(DCGM_ENGINE_ACTIVE)
    return _grouped(aggregation, expression, by, step, nodepool_label, name, per_step, liveness)


def gpus_requested(
    *,
    by: Sequence[str] = (NODEPOOL_LABEL,),
    resource: str | Sequence[str] = GPU_RESOURCE,
    mig: bool = True,
    time_slicing: Mapping[str, int] | None = None,
    exclude_namespaces: Sequence[str] = (),
    aggregation: Aggregation = "sum",
    step: timedelta = ONE_MINUTE,
    nodepool_label: str = KSM_NODEPOOL_LABEL,
    name: str = "gpus_requested",
    per_step: PerStep = "peak",
    liveness: str | None = KSM_LIVENESS,
    recorded: bool | None = None,
) -> SignalQuery:
    """GPUs (physical equivalents) requested by Pending or Running pods outside ``exclude_namespaces``;
    ``by`` is drawn from namespace, pod, node, nodepool.

    Each point is the step's peak by default: the nodes must have covered it, and a pod that came
    and went between two samples still needed a GPU. ``recorded``: read each pod's GPUs from the
    shipped recording rule (``RECORDED_GPUS_REQUESTED``) instead of working them out of the raw
    series at every point of every query (True), never (False), or when Prometheus holds the rule's
    series over the whole lookback (None: the raw query, with the recorded one beside it). The rule
    counts the default GPU units only.
    """
    _check_by(by, allowed=("namespace", "pod", "node", NODEPOOL_LABEL))
    units = GpuUnits.of(resource, mig, time_slicing)
    if recorded is None and units == RECORDED_UNITS:
        same = functools.partial(
            gpus_requested, by=by, resource=resource, mig=mig, time_slicing=time_slicing,
            exclude_namespaces=exclude_namespaces, aggregation=aggregation, step=step,
            nodepool_label=nodepool_label, name=name, per_step=per_step, liveness=liveness,
        )  # fmt: skip
        raw: SignalQuery = same(recorded=False)
        return replace(raw, recorded=same(recorded=True), recorded_series=RECORDED_GPUS_REQUESTED)
    if not recorded:
        demand = gpus_requested_per_pod(units, excluding(exclude_namespaces))
    elif units != RECORDED_UNITS:
        raise ValueError(
            f"recorded: the recording rule {RECORDED_GPUS_REQUESTED} counts {GPU_RESOURCE} and its MIG slices; "
            "other GPU units (resource, mig, time_slicing) read the raw series (leave recorded out)"
        )
    else:  # the rule keeps the namespace label: the same pods are left out after it as before it
        demand = f"{RECORDED_GPUS_REQUESTED}{{{excluding(exclude_namespaces).removeprefix(', ')}}}"
    return _counted(aggregation, demand, by, step, nodepool_label, name, per_step, liveness)


# The recording rule of gpus_requested's inner aggregation (manifests/monitoring/prometheusrule.yaml,
# kube-prometheus' level:metric:operations naming): each Pending or Running pod's GPUs per node, in
# the default units. The regular expression over resources, the table of shares and the phase join
# then run once per rule evaluation instead of at every point of every peak subquery.
RECORDED_GPUS_REQUESTED = "namespace_pod_node:gpu_autoscaler_gpus_requested:sum"
RECORDED_UNITS = GpuUnits.of(GPU_RESOURCE, True, None)


def gpus_requested_per_pod(units: GpuUnits, matchers: str = "") -> str:
    """GPUs requested by each Pending or Running pod, ``by (namespace, pod, node)``, in ``units``."""
    # max by (...) collapses duplicates from kube-state-metrics replicas before anything is summed.
    per_container = gpu_units(
        "kube_pod_container_resource_requests", ("namespace", "pod", "container", "node"), units, matchers
    )
    requests = aggregate("sum", ("namespace", "pod", "node"), per_container)
    phase = aggregate("max", ("namespace", "pod"), 'kube_pod_status_phase{phase=~"Pending|Running"}')
    return f"{requests} * on (namespace, pod) group_left () ({phase} == 1)"


def recording_rules() -> list[dict[str, str]]:
    """The rules a preset can read instead of raw series (``recorded``), as the manifests ship them."""
    return [{"record": RECORDED_GPUS_REQUESTED, "expr": gpus_requested_per_pod(RECORDED_UNITS)}]


def gpus_allocatable(
    *,
    by: Sequence[str] = (NODEPOOL_LABEL,),
    resource: str | Sequence[str] = GPU_RESOURCE,
    mig: bool = True,
    time_slicing: Mapping[str, int] | None = None,
    aggregation: Aggregation = "sum",
    step: timedelta = ONE_MINUTE,
    nodepool_label: str = KSM_NODEPOOL_LABEL,
    name: str = "gpus_allocatable",
    per_step: PerStep = "last",
    liveness: str | None = KSM_LIVENESS,
) -> SignalQuery:
    """Allocatable GPUs (physical equivalents) of the nodes; ``by`` is drawn from node and nodepool."""
    _check_by(by, allowed=("node", NODEPOOL_LABEL))
    units = GpuUnits.of(resource, mig, time_slicing)
    per_resource = gpu_units("kube_node_status_allocatable", ("node",), units, "")
    capacity = aggregate("sum", ("node",), per_resource)
    return _counted(aggregation, capacity, by, step, nodepool_label, name, per_step, liveness)


def request_rate(
    metric: str,
    *,
    window: str = "5m",
    by: Sequence[str] = ("namespace", "service"),
    matchers: Mapping[str, str] | None = None,
    aggregation: Aggregation = "sum",
    step: timedelta = ONE_MINUTE,
    name: str = "request_rate",
    per_step: PerStep = "last",
    liveness: str | None = "",
) -> SignalQuery:
    """Per-second rate of a request counter: ``sum by (by) (rate(metric{matchers}[window]))``.

    Alive while the counter has any series: ``liveness=""`` (the default) stands for them.
    """
    selector = ", ".join(f"{check_label_name(label)}={_quote(value)}" for label, value in (matchers or {}).items())
    counter = f"{check_metric_name(metric)}{{{selector}}}"
    expression = f"rate({counter}[{check_duration(window)}])"
    return SignalQuery(
        name=name,
        promql=aggregate(_checked(aggregation), by, expression),
        step=step,
        split_by=tuple(by),
        per_step=per_step,
        liveness=counter if liveness == "" else liveness,
    )


# Names for configuration files: ``preset: gpus_requested`` with the keyword arguments beside it.
PRESETS: Mapping[str, Callable[..., SignalQuery]] = {
    "gpu_utilization": gpu_utilization,
    "gpu_engine_active": gpu_engine_active,
    "gpus_requested": gpus_requested,
    "gpus_allocatable": gpus_allocatable,
    "request_rate": request_rate,
}


def ksm_resource(resource: str) -> str:
    """A Kubernetes resource name as kube-state-metrics labels it (``nvidia.com/gpu``: ``nvidia_com_gpu``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", resource)


def gpu_units(metric: str, by: Sequence[str], units: GpuUnits, matchers: str) -> str:
    """``max by (by, resource)`` of ``metric`` for each GPU resource of ``units``, in physical GPUs.

    One selector for every resource: each series is labelled with its share of a GPU ("3/7"), taken
    from its resource name, and multiplied by a table of those shares. (One selector per share made
    the 30-second peak subquery over two weeks several times slower.)
    """
    # Whole GPUs 1/1, time-sliced ones 1/replicas (GpuUnits.share).
    shares = {ksm_resource(name): f"1/{units.time_slicing.get(name, 1)}" for name in units.counted()}
    mig = units.mig
    prefix = ksm_resource(MIG_PREFIX)
    selected = "|".join([*shares, f"{prefix}.*"] if mig else shares)
    expression = f'{metric}{{resource=~"{selected}"{matchers}}}'
    for name, share in shares.items():
        expression = _share_label(expression, share, name)
    table = set(shares.values())
    if mig:
        # Every profile counts its slices of 7; the A30's own profiles, then, theirs of 4.
        expression = _share_label(expression, f"${{1}}/{FULL_GPU_SLICES}", f"{prefix}([0-9]+)g_.*")
        table |= {f"{slices}/{FULL_GPU_SLICES}" for slices in FULL_GPU_SLICE_COUNTS}
        for profile, slices in A30_MIG_PROFILES.items():
            share = f"{slices}/{A30_SLICES}"
            expression = _share_label(expression, share, f"{prefix}{ksm_resource(profile)}(_me)?")
            table.add(share)
    values = " or ".join(f'label_replace(vector({share}), "{_SHARE}", "{share}", "", "")' for share in sorted(table))
    return aggregate("max", (*by, "resource"), f"{expression} * on ({_SHARE}) group_left () ({values})")


def _share_label(expression: str, share: str, resource_regex: str) -> str:
    return f'label_replace({expression}, "{_SHARE}", "{share}", "resource", "{resource_regex}")'


def with_nodepool(expression: str, nodepool_label: str = KSM_NODEPOOL_LABEL) -> str:
    """Add a ``nodepool`` label to every series of ``expression`` by joining its ``node`` label.

    Series that have no node (Pending pods) are kept, without nodepool: the labelless ``vector(1)`` is
    their match. A series of a node that kube_node_labels no longer knows (one being deleted) is dropped.
    """
    nodepools = aggregate("max", ("node", NODEPOOL_LABEL), _node_pools(nodepool_label))
    # Written once: a second copy of the expression (``or ignoring``) doubled the cost of peak subqueries.
    return f"({expression}) * on (node) group_left ({NODEPOOL_LABEL}) ({nodepools} or vector(1))"


def known_pools(nodepool_label: str = KSM_NODEPOOL_LABEL) -> str:
    """One series per node pool that a node carries the label of (from ``kube_node_labels``)."""
    label = check_label_name(nodepool_label)
    return aggregate("count", (NODEPOOL_LABEL,), _node_pools(nodepool_label, f'{{{label}!=""}}'))


def _node_pools(nodepool_label: str, matchers: str = "") -> str:
    label = check_label_name(nodepool_label)
    return f'label_replace(kube_node_labels{matchers}, "{NODEPOOL_LABEL}", "$1", "{label}", "(.*)")'


def _dcgm(metric: str) -> str:
    per_host = [f'label_replace({metric}{{{host}!=""}}, "node", "$1", "{host}", "(.*)")' for host in DCGM_HOST_LABELS]
    # ``or`` de-duplicates a series that carries both host labels (same label set on both sides).
    return " or ".join(per_host)


def _counted(
    aggregation: Aggregation,
    expression: str,
    by: Sequence[str],
    step: timedelta,
    nodepool_label: str,
    name: str,
    per_step: PerStep,
    liveness: str | None,
) -> SignalQuery:
    """A count of GPUs: a series that is missing while the exporter is alive is 0."""
    query = _grouped(aggregation, expression, by, step, nodepool_label, name, per_step, liveness)
    # Only a series split by pool alone is a pool's series; other splits know theirs from history.
    pools = known_pools(nodepool_label) if tuple(by) == (NODEPOOL_LABEL,) else None
    return replace(query, zero_when_absent=True, pools=pools)


def _grouped(
    aggregation: Aggregation,
    expression: str,
    by: Sequence[str],
    step: timedelta,
    nodepool_label: str,
    name: str,
    per_step: PerStep,
    liveness: str | None,
) -> SignalQuery:
    if NODEPOOL_LABEL in by:
        expression = with_nodepool(expression, nodepool_label)
    promql = aggregate(_checked(aggregation), by, expression)
    return SignalQuery(name=name, promql=promql, step=step, split_by=tuple(by), per_step=per_step, liveness=liveness)


def _checked(aggregation: Aggregation) -> Aggregation:
    if aggregation not in ("avg", "sum", "max", "min"):
        raise ValueError(f"unknown aggregation {aggregation!r}")
    return aggregation


def excluding(namespaces: Sequence[str]) -> str:
    """Label matchers (``, namespace!~"a|b"``) that leave out pods of ``namespaces``; raises ValueError
    naming one that is not a namespace name."""
    for namespace in namespaces:
        if not _NAMESPACE.fullmatch(namespace):
            raise ValueError(f"exclude_namespaces: {namespace!r} is not a namespace name")
    return f', namespace!~"{"|".join(namespaces)}"' if namespaces else ""


def _check_by(by: Sequence[str], allowed: Sequence[str]) -> None:
    unknown = [label for label in by if label not in allowed]
    if unknown:
        raise ValueError(f"cannot split by {unknown}: this preset has only {list(allowed)}")


def _quote(value: str) -> str:
    # PromQL string literals follow Go's quoting, which JSON string escaping satisfies.
    return json.dumps(value, ensure_ascii=False)
