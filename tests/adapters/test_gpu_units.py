"""One definition of GPU units (``adapters.gpu_units``): the same pods, counted by the PromQL preset over
kube-state-metrics' series in a real Prometheus and by the pod-spec path (Pending pods, CronJob
windows), give the same number of GPUs: whole GPUs of two vendors, MIG profiles by compute slices
(the A30's too), time-sliced resources under their own names with their replicas, and a resource that
is no GPU."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pandas as pd
import pytest

from adapters.gpu_units import GpuUnits
from adapters.kubernetes.cronjobs import CronWindowSettings, gpu_template
from adapters.kubernetes.pending_pods import pending_gpus
from adapters.prometheus import presets
from adapters.prometheus.client import PrometheusClientSettings, PrometheusSource
from tests import kube_schemas
from tests.cluster_scenario import Node, Pod, Scenario, start_prometheus
from tests.kube_objects import pending_pod
from tests.prometheus_fixture import PrometheusServer

END = pd.Timestamp("2026-11-20T12:00:00Z")
START = END - pd.Timedelta(hours=1)
# (resource, amount) of one Pending pod each.
REQUESTS = [
    ("nvidia.com/gpu", 2),
    ("amd.com/gpu", 1),
    ("nvidia.com/mig-3g.40gb", 1),
    ("nvidia.com/mig-1g.10gb+me", 2),
    ("nvidia.com/mig-2g.12gb", 2),  # the A30's: 2 of 4 slices
    ("nvidia.com/gpu.shared", 4),
    ("example.com/gpu-ts8", 4),  # a time-sliced name of one's own, 8 replicas
    ("example.com/fpga", 3),  # not a GPU on either path
]
UNITS = {
    "everything": GpuUnits.of(
        ["nvidia.com/gpu", "amd.com/gpu"], True, {"nvidia.com/gpu.shared": 4, "example.com/gpu-ts8": 8}
    ),
    "nvidia-only": GpuUnits.of("nvidia.com/gpu", True, {"nvidia.com/gpu.shared": 4}),
    "no-mig": GpuUnits.of(["nvidia.com/gpu", "amd.com/gpu"], False, {"example.com/gpu-ts8": 8}),
    "defaults": GpuUnits(),
}
EXPECTED = {
    "everything": 2 + 1 + Fraction(3, 7) + Fraction(2, 7) + 1 + 1 + Fraction(1, 2),
    "nvidia-only": 2 + Fraction(3, 7) + Fraction(2, 7) + 1 + 1,
    "no-mig": 2 + 1 + Fraction(1, 2),
    "defaults": 2 + Fraction(3, 7) + Fraction(2, 7) + 1,
}


def pod_name(index: int) -> str:
    return f"pod-{index}"


def pod_spec(resource: str, amount: int) -> dict[str, object]:
    container = {"name": "main", "image": "trainer", "resources": {"limits": {resource: str(amount)}}}
    return {"containers": [container], "restartPolicy": "Never"}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    pods = [
        Pod("ml", pod_name(index), None, START, END + pd.Timedelta(hours=1), gpus=amount, resource=resource)
        for index, (resource, amount) in enumerate(REQUESTS)
    ]
    scenario = Scenario(START, END, nodes=[Node("a100-1", "a100")], pods=pods)
    server = start_prometheus(scenario, tmp_path_factory.mktemp("gpu-units"))
    try:
        yield server
    finally:
        server.stop()


async def counted_by_promql(server: PrometheusServer, units: GpuUnits) -> float:
    query = presets.gpus_requested(
        by=(), resource=units.whole, mig=units.mig, time_slicing=units.time_slicing, per_step="last"
    )
    async with PrometheusSource(PrometheusClientSettings(server.url, timeout_s=30)) as source:
        signals = await source.backfill(query, (END - pd.Timedelta(minutes=5)).to_pydatetime(), END.to_pydatetime())
    (total,) = signals
    return float(total.series.iloc[-1])


@pytest.mark.parametrize("name", sorted(UNITS))
async def test_the_same_pods_count_the_same_both_ways(prometheus: PrometheusServer, name: str) -> None:
    units = UNITS[name]
    pods = [pending_pod(pod_name(i), pod_spec(resource, amount)) for i, (resource, amount) in enumerate(REQUESTS)]
    for pod in pods:
        kube_schemas.validate("", "Pod", pod)  # what the API would serve
    pending = sum(pod.gpus for pod in pending_gpus(pods, None, lambda pod: False, units))
    settings = CronWindowSettings(units=units)
    windows = 0.0
    for index, (resource, amount) in enumerate(REQUESTS):
        template = gpu_template(cronjob(index, pod_spec(resource, amount)), settings)
        windows += template.gpus if template is not None else 0.0
    promql = await counted_by_promql(prometheus, units)
    assert promql == pytest.approx(float(EXPECTED[name]))
    assert pending == pytest.approx(promql)
    assert windows == pytest.approx(promql)


def cronjob(index: int, spec: dict[str, object]) -> dict[str, object]:
    job = {"template": {"spec": spec}}
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": f"train-{index}", "namespace": "ml"},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": job}},
    }
    kube_schemas.validate("batch", "CronJob", cron)
    return cron


def test_units_refuse_what_would_count_twice_or_not_at_all() -> None:
    with pytest.raises(ValueError, match="MIG resources count by their profile"):
        GpuUnits.of(time_slicing={"nvidia.com/mig-1g.10gb": 2})
    with pytest.raises(ValueError, match="needs replicas >= 1"):
        GpuUnits.of(time_slicing={"nvidia.com/gpu.shared": 0})
    with pytest.raises(ValueError, match="not an extended resource name"):
        GpuUnits.of("gpu")
    with pytest.raises(ValueError, match="no GPU resource counted"):
        GpuUnits((), False, {})
    with pytest.raises(ValueError, match=r"nvidia.com/gpu.shared counts 1/4 GPU in one signal, 1/2 in another"):
        GpuUnits.of(time_slicing={"nvidia.com/gpu.shared": 4}).merged(
            GpuUnits.of(time_slicing={"nvidia.com/gpu.shared": 2})
        )
    merged = GpuUnits.of("nvidia.com/gpu").merged(GpuUnits.of("amd.com/gpu"))
    assert merged.whole == ("nvidia.com/gpu", "amd.com/gpu")


def test_a_malformed_mig_profile_skips_the_pod_and_the_cronjob_names_it(caplog: pytest.LogCaptureFixture) -> None:
    from adapters.kubernetes.cronjobs import cronjob_windows

    bad = pod_spec("nvidia.com/mig-big", 1)
    good = pod_spec("nvidia.com/gpu", 1)
    found = pending_gpus([pending_pod("bad", bad), pending_pod("good", good)], None, lambda pod: False)
    assert [pod.name for pod in found] == ["good"]
    assert "Pending pod ml/bad skipped: 'nvidia.com/mig-big' is not a MIG profile" in caplog.text
    now = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
    windows = cronjob_windows(
        [cronjob(0, bad), cronjob(1, good)], [], now, CronWindowSettings(horizon=timedelta(hours=2))
    )
    assert [window.name for window in windows] == ["train-1"]
    assert (
        "CronJob ml/train-0 skipped: unreadable GPU request: 'nvidia.com/mig-big' is not a MIG profile" in caplog.text
    )
