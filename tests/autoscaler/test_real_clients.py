"""Real Kubernetes clients against the running server: kubectl and kubernetes-asyncio."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.serving.provider import empty_snapshot
from tests.autoscaler.conftest import METRICS, RunningServer, fixed_snapshot
from tests.pki import Client

PREFIX = "/apis/external.metrics.k8s.io/v1beta1"


def write_kubeconfig(server: RunningServer, user: Client, path: Path) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server.base_url, "certificate-authority": str(server.pki.client_ca)}}
        ],
        "users": [{"name": "user", "user": {"client-certificate": str(user.cert), "client-key": str(user.key)}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture
def kubeconfig(api_server: RunningServer, tmp_path: Path) -> Path:
    return write_kubeconfig(api_server, api_server.pki.alice, tmp_path / "kubeconfig")


async def kubectl_raw(kubeconfig: Path, path: str) -> tuple[int, str, str]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not installed (make test installs it on Debian machines that lack it)")
    process = await asyncio.create_subprocess_exec(
        binary,
        "--kubeconfig",
        str(kubeconfig),
        "get",
        "--raw",
        path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode or 0, stdout.decode(), stderr.decode()


@pytest.mark.kubectl
@pytest.mark.parametrize(
    ("path", "kind"),
    [("/apis", "APIGroupList"), ("/apis/external.metrics.k8s.io", "APIGroup"), (PREFIX, "APIResourceList")],
)
async def test_kubectl_discovery(kubeconfig, path, kind):
    code, stdout, stderr = await kubectl_raw(kubeconfig, path)
    assert code == 0, stderr
    assert json.loads(stdout)["kind"] == kind


@pytest.mark.kubectl
async def test_kubectl_reads_a_metric_with_a_selector(kubeconfig):
    code, stdout, stderr = await kubectl_raw(
        kubeconfig, f"{PREFIX}/namespaces/default/gpu_demand_forecast?labelSelector=pool%3Da100"
    )
    assert code == 0, stderr
    body = json.loads(stdout)
    assert body["kind"] == "ExternalMetricValueList"
    assert body["items"] == [
        {
            "metricName": "gpu_demand_forecast",
            "metricLabels": {"pool": "a100", "region": "eu"},
            "timestamp": "2026-11-22T08:00:00Z",
            "value": "12",
        }
    ]


@pytest.mark.kubectl
async def test_kubectl_unknown_metric_is_not_found(kubeconfig):
    code, _, stderr = await kubectl_raw(kubeconfig, f"{PREFIX}/namespaces/default/nope")
    assert code == 1
    assert "Error from server (NotFound)" in stderr
    assert (
        "external metric 'nope' is not served by this configuration; "
        "served: gpu_demand_forecast, gpu_headroom, request_rate_forecast"
    ) in stderr


@pytest.mark.kubectl
async def test_kubectl_waits_out_the_warm_up_and_reads_the_first_forecast(api_server, kubeconfig):
    """client-go retries a 503 after its Retry-After: kubectl answers the value once it is served."""
    api_server.provider.swap(empty_snapshot(METRICS))
    api_server.provider.expect_first_forecast(api_server.clock.now + timedelta(seconds=2))  # Retry-After: 2
    started = time.monotonic()
    reading = asyncio.create_task(kubectl_raw(kubeconfig, f"{PREFIX}/namespaces/default/gpu_headroom"))
    await asyncio.sleep(1.0)
    api_server.provider.swap(fixed_snapshot())
    code, stdout, stderr = await reading
    assert code == 0, stderr
    assert json.loads(stdout)["items"][0]["value"] == "500m"
    assert time.monotonic() - started >= 2.0  # it waited as told, then asked again


@pytest.mark.kubectl
@pytest.mark.slow
async def test_kubectl_shows_the_warm_up_status_when_the_forecast_is_late(api_server, kubeconfig):
    api_server.provider.swap(empty_snapshot(METRICS))
    api_server.provider.expect_first_forecast(api_server.clock.now - timedelta(seconds=5))  # Retry-After: 1
    code, _, stderr = await kubectl_raw(kubeconfig, f"{PREFIX}/namespaces/default/gpu_demand_forecast")
    assert code == 1
    assert stderr == (
        "Error from server (ServiceUnavailable): gpu-autoscaler is warming up: the first forecast was due by "
        "2026-11-22T08:00:25Z and is late (see /readyz?verbose); no value of 'gpu_demand_forecast' yet\n"
    )


@pytest.mark.kubectl
async def test_kubectl_bad_selector_is_bad_request(kubeconfig):
    code, _, stderr = await kubectl_raw(
        kubeconfig, f"{PREFIX}/namespaces/default/gpu_demand_forecast?labelSelector=pool%20in%20(a"
    )
    assert code == 1
    assert "Error from server (BadRequest)" in stderr
    assert "invalid labelSelector" in stderr


@pytest.mark.kubectl
async def test_kubectl_shows_1_kib_of_a_huge_name_or_selector(kubeconfig):
    """Issue 38: what kubectl prints quotes the first 1 KiB of the input, however long it was."""
    name = "m" * 60_000
    code, _, stderr = await kubectl_raw(kubeconfig, f"{PREFIX}/namespaces/default/{name}")
    assert code == 1
    assert stderr == (
        f"Error from server (NotFound): external metric '{'m' * 1024}... (58976 more bytes)' is not served by this "
        "configuration; served: gpu_demand_forecast, gpu_headroom, request_rate_forecast\n"
    )
    selector = "pool%20in%20(" + "a" * 16_000  # a 16,000-character label value
    code, _, stderr = await kubectl_raw(
        kubeconfig, f"{PREFIX}/namespaces/default/gpu_headroom?labelSelector={selector}"
    )
    assert code == 1
    assert stderr == (
        f"Error from server (BadRequest): invalid labelSelector: invalid label value '{'a' * 1024}... (14976 more "
        "bytes)': must be 63 characters or less, alphanumeric, '-', '_' or '.', starting and ending with an "
        "alphanumeric character\n"
    )


async def api_client_for(kubeconfig: Path) -> client.ApiClient:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


async def test_kubernetes_asyncio_reads_discovery_and_metric(kubeconfig):
    async with await api_client_for(kubeconfig) as api:
        groups = await client.ApisApi(api).get_api_versions()
        assert [group.name for group in groups.groups] == ["external.metrics.k8s.io"]
        assert groups.groups[0].preferred_version.group_version == "external.metrics.k8s.io/v1beta1"
        # An external metric reads like a namespaced custom resource list whose "plural" is the metric.
        custom = client.CustomObjectsApi(api)
        body = await custom.list_namespaced_custom_object(
            "external.metrics.k8s.io", "v1beta1", "default", "gpu_demand_forecast", label_selector="region notin (eu)"
        )
        assert body["items"][0]["metricLabels"] == {"pool": "h100", "region": "us"}
        assert body["items"][0]["value"] == "3250m"
        with pytest.raises(ApiException) as caught:
            await custom.list_namespaced_custom_object("external.metrics.k8s.io", "v1beta1", "default", "nope")
        assert caught.value.status == 404
        assert json.loads(caught.value.body)["reason"] == "NotFound"
        with pytest.raises(ApiException) as caught:
            await custom.list_namespaced_custom_object(
                "external.metrics.k8s.io", "v1beta1", "default", "gpu_headroom", label_selector="a in ("
            )
        assert caught.value.status == 400
