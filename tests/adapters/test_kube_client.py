"""Building the client from a kubeconfig, and turning every failure into the adapter's own errors."""

from __future__ import annotations

import email.utils
import re
import time

import pytest
import yaml
from kubernetes_asyncio.client import BatchV1Api

from adapters.kubernetes.client import (
    KubeClientSettings,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    KubeThrottled,
    KubeUnavailable,
    ResourceVersionExpired,
    create_api_client,
    parse_retry_after,
    read_json,
)
from tests import fakekube
from tests.pki import make_pki

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api


async def list_cronjobs(api) -> dict:
    return await read_json(BatchV1Api(api).list_cron_job_for_all_namespaces(_preload_content=False), "list cronjobs")


async def test_client_from_kubeconfig_reaches_the_server_with_its_token(fake_kube, kube_api):
    pod = {"containers": [{"name": "train", "image": "trainer"}], "restartPolicy": "Never"}
    spec = {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"template": {"spec": pod}}}}
    fake_kube.add("cronjobs", {"metadata": {"name": "a", "namespace": "ml"}, "spec": spec})  # the API requires spec
    document = await list_cronjobs(kube_api)
    assert document["kind"] == "CronJobList"
    assert [item["metadata"]["name"] for item in document["items"]] == ["a"]
    assert fake_kube.requests[-1].headers["Authorization"] == f"Bearer {fakekube.FAKE_ADMIN_TOKEN}"


async def test_client_over_https_trusts_the_kubeconfig_ca(tmp_path):
    pki = make_pki(tmp_path / "pki")
    fake = fakekube.FakeKube(tmp_path, tls=(pki.serving_cert, pki.serving_key, pki.client_ca))
    await fake.start()
    try:
        assert fake.url.startswith("https://")
        api = await fake.api_client()
        try:
            assert (await list_cronjobs(api))["items"] == []
        finally:
            await api.close()
    finally:
        await fake.stop()


async def test_exec_plugin_credentials_are_fetched_again(fake_kube, tmp_path):
    token_file = tmp_path / "token"
    plugin = tmp_path / "credential-plugin.sh"
    api_version = "client.authentication.k8s.io/v1beta1"
    plugin.write_text(
        "#!/bin/sh\n"
        f'printf \'{{"apiVersion":"{api_version}","kind":"ExecCredential","status":{{"token":"%s"}}}}\' '
        f'"$(cat {token_file})"\n'
    )
    plugin.chmod(0o755)
    token_file.write_text("first")
    kubeconfig = yaml.safe_load(fake_kube.kubeconfig_path.read_text())
    kubeconfig["users"][0]["user"] = {"exec": {"apiVersion": api_version, "command": str(plugin)}}
    path = tmp_path / "exec-kubeconfig.yaml"
    path.write_text(yaml.safe_dump(kubeconfig))
    fake_kube.bearer_token = "first"

    api = await create_api_client(KubeClientSettings(kubeconfig_path=path, credential_refresh_s=0))
    try:
        await list_cronjobs(api)
        token_file.write_text("second")  # the plugin now hands out a new token
        fake_kube.bearer_token = "second"
        await list_cronjobs(api)
    finally:
        await api.close()
    assert [r.headers["Authorization"] for r in fake_kube.requests] == ["Bearer first", "Bearer second"]


async def test_user_agent_setting_is_sent_with_every_request(fake_kube):
    named = await create_api_client(
        KubeClientSettings(
            kubeconfig_path=fake_kube.kubeconfig_path, user_agent="gpu-autoscaler/0.1.0 (pod-a_1f2e3d4c)"
        )
    )
    unnamed = await create_api_client(KubeClientSettings(kubeconfig_path=fake_kube.kubeconfig_path))
    try:
        await list_cronjobs(named)
        await list_cronjobs(named)
        await list_cronjobs(unnamed)
    finally:
        await named.close()
        await unnamed.close()
    agents = [r.headers["User-Agent"] for r in fake_kube.requests]
    assert agents[:2] == ["gpu-autoscaler/0.1.0 (pod-a_1f2e3d4c)"] * 2
    assert agents[2].startswith("OpenAPI-Generator/")  # without the setting: the library's own


async def test_the_service_client_names_its_replica_like_kubectl(fake_kube, monkeypatch):
    """``gpu-autoscaler/<version> (<Lease identity>)``: POD_NAME plus the per-process suffix."""
    from autoscaler import __version__
    from autoscaler.app.serving import kubernetes_client
    from autoscaler.config.settings import Settings

    monkeypatch.setenv("POD_NAME", "gpu-autoscaler-7d9f-x2k4")
    settings = Settings.model_validate({"kubernetes": {"kubeconfig": str(fake_kube.kubeconfig_path)}})
    async with kubernetes_client(settings, "gpu-autoscaler-7d9f-x2k4_0a1b2c3d") as given:
        await list_cronjobs(given)
    async with kubernetes_client(settings) as fresh:
        await list_cronjobs(fresh)
    agents = [r.headers["User-Agent"] for r in fake_kube.requests]
    assert agents[0] == f"gpu-autoscaler/{__version__} (gpu-autoscaler-7d9f-x2k4_0a1b2c3d)"
    assert re.fullmatch(
        rf"gpu-autoscaler/{re.escape(__version__)} \(gpu-autoscaler-7d9f-x2k4_[0-9a-f]{{8}}\)", agents[1]
    )


async def test_missing_kubeconfig_is_a_kube_error(tmp_path):
    with pytest.raises(KubeError, match="cannot load"):
        await create_api_client(KubeClientSettings(kubeconfig_path=tmp_path / "nope.yaml"))


async def test_in_cluster_config_outside_a_cluster_is_a_kube_error(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(KubeError, match="cannot load"):
        await create_api_client(KubeClientSettings())


async def test_wrong_context_is_a_kube_error(fake_kube):
    with pytest.raises(KubeError, match="cannot load"):
        await create_api_client(KubeClientSettings(kubeconfig_path=fake_kube.kubeconfig_path, context="prod"))


@pytest.mark.parametrize(
    ("status", "retry_after", "error", "delay"),
    [
        (404, None, KubeNotFound, None),
        (401, None, KubeForbidden, None),
        (403, None, KubeForbidden, None),
        (410, None, ResourceVersionExpired, None),
        (429, 7, KubeThrottled, 7.0),
        (500, None, KubeUnavailable, None),
        (503, 2, KubeUnavailable, 2.0),
        (422, None, KubeError, None),
    ],
)
async def test_statuses_become_own_errors(fake_kube, kube_api, status, retry_after, error, delay):
    fake_kube.fail(status=status, retry_after=retry_after)
    with pytest.raises(error) as caught:
        await list_cronjobs(kube_api)
    assert type(caught.value) is error
    assert caught.value.status == status
    assert caught.value.retry_after_s == delay
    assert f"injected fault {status}" in str(caught.value)  # the Status message is kept


async def test_unknown_resource_is_not_found(fake_kube, kube_api):
    fake_kube.installed.discard("cronjobs")
    with pytest.raises(KubeNotFound):
        await list_cronjobs(kube_api)


async def test_dropped_connection_is_unavailable(fake_kube, kube_api):
    fault = fake_kube.fail(disconnect=True, times=None)
    with pytest.raises(KubeUnavailable):
        await list_cronjobs(kube_api)
    assert fault.hits >= 1


async def test_server_gone_is_unavailable(fake_kube, kube_api):
    await fake_kube.stop()
    with pytest.raises(KubeUnavailable):
        await list_cronjobs(kube_api)


@pytest.mark.looptime
async def test_a_request_that_hangs_times_out_as_unavailable(fake_kube, tmp_path):
    api = await create_api_client(KubeClientSettings(kubeconfig_path=fake_kube.kubeconfig_path, request_timeout_s=3))
    try:
        fake_kube.fail(delay_s=3600)
        with pytest.raises(KubeUnavailable, match="Timeout"):
            await list_cronjobs(api)
    finally:
        await api.close()


def test_retry_after_parsing():
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 <= (parse_retry_after(in_a_minute) or 0) <= 61
