"""``gpu-autoscaler preflight`` and serve's start-up check against states of the fake Kubernetes API:
the external metrics APIService absent, ours, KEDA's, prometheus-adapter's; RBAC denied (per
SelfSubjectAccessReview); the authentication ConfigMap missing; a CRD not served; ``--take-over``."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from autoscaler.app.serving import serve
from autoscaler.checks.preflight import PreflightFailed
from autoscaler.commands.cli import main
from autoscaler.config.settings_loader import load_settings
from tests.cli_helpers import assert_runtime_failure
from tests.fakekube import FakeKube
from tests.pki import make_pki

APISERVICE = "v1beta1.external.metrics.k8s.io"
CLUSTER_ROLE_FIX = "grant it in the service's ClusterRole (manifests/base/clusterrole.yaml)"


def apiservice(namespace: str, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": APISERVICE, "labels": labels or {}},
        "spec": {
            "service": {"namespace": namespace, "name": name, "port": 443},
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }


# As KEDA's Helm chart (kedacore/charts keda/templates/metrics-server/apiservice.yaml) labels it.
KEDA = apiservice(
    "keda",
    "keda-operator-metrics-apiserver",
    {
        "app.kubernetes.io/name": APISERVICE,
        "app.kubernetes.io/part-of": "keda-operator",
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": "keda-2.16.0",
    },
)
PROMETHEUS_ADAPTER = apiservice(
    "monitoring",
    "prometheus-adapter",
    {"app.kubernetes.io/name": "prometheus-adapter", "helm.sh/chart": "prometheus-adapter-4.11.0"},
)


@pytest.fixture
def cluster(fake_kube: FakeKube, tmp_path: Path) -> FakeKube:
    """A cluster where everything the configuration needs is in place."""
    pki = make_pki(tmp_path / "pki")
    fake_kube.set_request_header_config(
        requestheader_client_ca=pki.proxy_ca.read_text(), allowed_names=["front-proxy-client"]
    )
    return fake_kube


@pytest.fixture
def config(fake_kube: FakeKube, tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    document = {
        "server": {"bind_address": "127.0.0.1", "secure_port": 0, "http_port": 0, "shutdown_delay": "0s"},
        "kubernetes": {"kubeconfig": str(fake_kube.kubeconfig_path)},
        "inputs": {"cronjobs": True, "nodeclaims": True, "nodepools": False, "pending_pods": False, "kueue": False},
        "state_dir": str(tmp_path / "state"),
    }
    path.write_text(yaml.safe_dump(document))
    return path


def claiming(config: Path) -> Path:
    """The config as manifests/overlays/external-metrics-api runs it: the APIService is to be ours."""
    document = yaml.safe_load(config.read_text())
    document["preflight"] = {"claim_apiservice": True}
    config.write_text(yaml.safe_dump(document))
    return config


async def preflight(*args: str) -> Result:
    # The CLI runs its own event loop; the fake API answers from this one, so the CLI gets a thread.
    return await asyncio.to_thread(CliRunner().invoke, main, ["preflight", *args])


ALL_OK = [
    "ok      configmap kube-system/extension-apiserver-authentication: request-header CA present "
    "(allowed client names: front-proxy-client)",
    "ok      rbac get apiservices.apiregistration.k8s.io/v1beta1.external.metrics.k8s.io: allowed "
    "(needed by preflight (the APIService's owner))",
    "ok      rbac get,list,watch configmaps/extension-apiserver-authentication in namespace kube-system: "
    "allowed (needed by auth.mode: kubernetes)",
    "ok      rbac create tokenreviews.authentication.k8s.io: allowed (needed by bearer tokens (TokenReview))",
    "ok      rbac create subjectaccessreviews.authorization.k8s.io: allowed (needed by auth.authorization: kubernetes)",
    "ok      rbac list,watch cronjobs.batch: allowed (needed by inputs.cronjobs)",
    "ok      rbac list,watch jobs.batch: allowed (needed by inputs.cronjobs)",
    "ok      rbac list,watch nodeclaims.karpenter.sh: allowed (needed by inputs.nodeclaims)",
    "ok      rbac list,watch resourceclaims.resource.k8s.io: allowed (needed by inputs.resource_claims)",
    "ok      rbac list,watch resourceclaimtemplates.resource.k8s.io: allowed (needed by inputs.resource_claims)",
    "ok      rbac list,watch resourceslices.resource.k8s.io: allowed (needed by inputs.resource_claims)",
    "ok      rbac list,watch deviceclasses.resource.k8s.io: allowed (needed by inputs.resource_claims)",
    "ok      crd nodeclaims.karpenter.sh/v1: served (needed by inputs.nodeclaims)",
]


async def test_no_apiservice_yet_passes_every_check(cluster, config):
    result = await preflight("--config", str(config))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"ok      apiservice {APISERVICE}: absent, no provider yet: install with kubectl apply -k "
        "manifests/overlays/external-metrics-api, which registers Service gpu-autoscaler/gpu-autoscaler",
        *ALL_OK,
    ]
    # Every permission was asked about, verb by verb, in the shape kube-apiserver validated.
    asked = [spec["resourceAttributes"] for spec in cluster.ssar_requests]
    assert {"verb": "watch", "group": "batch", "resource": "cronjobs"} in asked
    assert {
        "verb": "list",
        "group": "",
        "resource": "configmaps",
        "namespace": "kube-system",
        "name": "extension-apiserver-authentication",
    } in asked
    assert len(asked) == 20


async def test_our_own_apiservice_passes(cluster, config):
    cluster.add("apiservices", apiservice("gpu-autoscaler", "gpu-autoscaler"))
    result = await preflight("--config", str(config))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (
        f"ok      apiservice {APISERVICE}: served by this service (Service gpu-autoscaler/gpu-autoscaler): the "
        "install of kubectl apply -k manifests/overlays/external-metrics-api"
    )


KEDA_OWNER = (
    "Service keda/keda-operator-metrics-apiserver (KEDA; labels app.kubernetes.io/part-of=keda-operator, "
    "app.kubernetes.io/name=v1beta1.external.metrics.k8s.io, app.kubernetes.io/managed-by=Helm, "
    "helm.sh/chart=keda-2.16.0)"
)
BESIDE_KEDA = (
    "install beside it with kubectl apply -k manifests/overlays/keda (KEDA keeps the APIService and calls this "
    "service over gRPC)"
)
CUT_OFF = (
    "applying this service's APIService would cut every HPA and ScaledObject that reads external metrics from it "
    "off its metrics"
)
ADAPTER_OWNER = (
    "Service monitoring/prometheus-adapter (prometheus-adapter; labels app.kubernetes.io/name=prometheus-adapter, "
    "helm.sh/chart=prometheus-adapter-4.11.0)"
)
NO_OVERLAY_FITS = (
    f"already served by {ADAPTER_OWNER}; no overlay fits: {CUT_OFF}, and kubectl apply -k manifests/overlays/keda "
    "needs KEDA to own it. Either move to KEDA (prometheus-adapter is deprecated in its favour): install KEDA, "
    "which takes the APIService, move the HPAs that read this provider to ScaledObjects, then kubectl apply -k "
    "manifests/overlays/keda; or replace it on purpose: --take-over, then kubectl apply -k "
    "manifests/overlays/external-metrics-api"
)


async def test_keda_owns_the_apiservice_the_keda_overlay_fits(cluster, config):
    cluster.add("apiservices", KEDA)
    result = await preflight("--config", str(config))
    assert result.exit_code == 0, result.output
    first = f"ok      apiservice {APISERVICE}: served by {KEDA_OWNER}: {BESIDE_KEDA}"
    assert result.stdout.splitlines() == [first, *ALL_OK]


async def test_an_install_claiming_the_apiservice_is_refused_while_keda_owns_it(cluster, config):
    cluster.add("apiservices", KEDA)
    result = await preflight("--config", str(claiming(config)))
    assert result.stdout.splitlines() == [
        f"problem apiservice {APISERVICE}: already served by {KEDA_OWNER}; {CUT_OFF}. Either {BESIDE_KEDA}, or "
        "replace it on purpose with --take-over",
        *ALL_OK,
    ]
    assert_runtime_failure(result, "preflight: 1 of 14 checks found a problem (see above)")


@pytest.mark.parametrize("claim", [False, True], ids=["before-install", "claiming"])
async def test_prometheus_adapter_owns_the_apiservice_no_overlay_fits(cluster, config, claim):
    cluster.add("apiservices", PROMETHEUS_ADAPTER)
    result = await preflight("--config", str(claiming(config) if claim else config), "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["checks"][0] == {
        "name": f"apiservice {APISERVICE}",
        "ok": False,
        "message": NO_OVERLAY_FITS,
        # Only an install that would be the provider must not start beside another one.
        "blocks_start": claim,
    }
    assert all(check["ok"] and not check["blocks_start"] for check in report["checks"][1:])


@pytest.mark.parametrize("owner", [KEDA, PROMETHEUS_ADAPTER], ids=["keda", "prometheus-adapter"])
async def test_take_over_accepts_another_owner_and_names_the_overlay(cluster, config, owner):
    cluster.add("apiservices", owner)
    result = await preflight("--config", str(config), "--take-over")
    assert result.exit_code == 0, result.output
    described = KEDA_OWNER if owner is KEDA else ADAPTER_OWNER
    assert result.stdout.splitlines()[0] == (
        f"ok      apiservice {APISERVICE}: served by {described}; taken over (--take-over): install with kubectl "
        "apply -k manifests/overlays/external-metrics-api; once its APIService is applied, everything that read "
        "external metrics from it reads this service's instead"
    )


async def test_rbac_denied_names_the_verbs_the_setting_and_the_fix(cluster, config):
    cluster.ssar_rule = lambda spec: spec["resourceAttributes"]["resource"] != "nodeclaims"
    result = await preflight("--config", str(config))
    assert (
        "problem rbac list,watch nodeclaims.karpenter.sh: denied: list (denied by the fake's ssar_rule), watch "
        f"(denied by the fake's ssar_rule); needed by inputs.nodeclaims: {CLUSTER_ROLE_FIX}"
    ) in result.stdout.splitlines()
    assert [line.split()[0] for line in result.stdout.splitlines()].count("problem") == 1
    assert_runtime_failure(result, "preflight: 1 of 14 checks found a problem")


async def test_authentication_configmap_missing(fake_kube, config):
    result = await preflight("--config", str(config))
    assert result.stdout.splitlines()[1] == (
        "problem configmap kube-system/extension-apiserver-authentication: does not exist: kube-apiserver "
        "publishes it when it runs with --requestheader-client-ca-file; without it the aggregator's requests "
        "cannot be authenticated"
    )
    assert_runtime_failure(result, "preflight: 1 of 14 checks found a problem")


async def test_authentication_configmap_without_request_header_ca(fake_kube, config):
    fake_kube.set_request_header_config(requestheader_client_ca=None, client_ca="")
    result = await preflight("--config", str(config))
    assert result.stdout.splitlines()[1].startswith(
        "problem configmap kube-system/extension-apiserver-authentication: has no requestheader-client-ca-file"
    )
    assert result.exit_code == 1


@pytest.mark.parametrize("absent", [{"nodeclaims"}, {"nodeclaims", "nodepools"}], ids=["resource", "group-version"])
async def test_crd_not_served(cluster, config, absent):
    cluster.installed -= absent  # without either, discovery has no karpenter.sh/v1 at all (404)
    result = await preflight("--config", str(config))
    assert result.stdout.splitlines()[-1] == (
        "problem crd nodeclaims.karpenter.sh/v1: not served by the API; needed by inputs.nodeclaims: "
        "install Karpenter (v1 API) or set inputs.nodeclaims: false"
    )
    assert_runtime_failure(result, "preflight: 1 of 14 checks found a problem")


async def test_unreachable_api_is_a_runtime_failure(cluster, config):
    await cluster.stop()
    result = await preflight("--config", str(config))
    assert_runtime_failure(result, "cannot check the cluster: read apiservice v1beta1.external.metrics.k8s.io:")


# --- serve's start-up check -------------------------------------------------------------------------------


async def test_serve_claiming_the_apiservice_refuses_to_start_while_keda_owns_it(cluster, config):
    cluster.add("apiservices", KEDA)
    result = await asyncio.to_thread(CliRunner().invoke, main, ["serve", "--config", str(claiming(config))])
    assert_runtime_failure(result, f"cannot serve: preflight found 1 problem(s): apiservice {APISERVICE}: already")
    assert "--take-over" in result.stderr.splitlines()[-1]
    # Each check is logged first, so the pod's log shows the whole picture.
    logged = [line.split("autoscaler.app.serving: ")[1] for line in result.stderr.splitlines() if "serving: " in line]
    assert logged[0].startswith(f"preflight problem apiservice {APISERVICE}: already served by {KEDA_OWNER}")
    assert logged[1:] == [f"preflight {line}" for line in ALL_OK]
    # Nothing was served: the refusal came before the pipeline started its watches.
    assert cluster.requests_for("cronjobs") == []


@pytest.mark.parametrize("override", [{"preflight.on_start": False}, {"preflight.take_over": True}])
async def test_serve_starts_with_skip_preflight_or_take_over(cluster, config, override):
    cluster.add("apiservices", KEDA)
    claiming(config)
    settings = load_settings(config, overrides=override)
    with pytest.raises(PreflightFailed):
        await serve(load_settings(config), stop=asyncio.Event())
    stop = asyncio.Event()
    stop.set()  # serve to the end at once: returning normally means it got past the check and served
    await serve(settings, stop=stop)
    assert cluster.requests_for("cronjobs"), "the pipeline started"


async def test_serve_by_default_starts_beside_keda(cluster, config):
    """Safe by default: an install that does not claim the APIService runs beside its owner."""
    cluster.add("apiservices", KEDA)
    stop = asyncio.Event()
    stop.set()
    await serve(load_settings(config), stop=stop)
    assert cluster.requests_for("cronjobs"), "the pipeline started"


async def test_serve_starts_degraded_when_only_an_input_is_missing(cluster, config, caplog):
    cluster.installed.discard("nodeclaims")  # Karpenter absent: the lead time falls back to the default
    stop = asyncio.Event()
    stop.set()
    with caplog.at_level(logging.WARNING, logger="autoscaler.app.serving"):
        await serve(load_settings(config), stop=stop)
    assert cluster.requests_for("cronjobs"), "the pipeline started"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "preflight" in r.getMessage()]
    assert warned == [
        "preflight problem crd nodeclaims.karpenter.sh/v1: not served by the API; needed by inputs.nodeclaims: "
        "install Karpenter (v1 API) or set inputs.nodeclaims: false"
    ]


@pytest.mark.parametrize(
    ("flags", "on_start", "take_over"),
    [([], True, False), (["--skip-preflight"], False, False), (["--take-over"], True, True)],
)
def test_serve_flags_set_the_preflight_settings(config, monkeypatch, flags, on_start, take_over):
    seen = []

    async def recording_serve(settings, *, stop=None):
        seen.append(settings.preflight)

    monkeypatch.setattr("autoscaler.app.serving.serve", recording_serve)
    result = CliRunner().invoke(main, ["serve", "--config", str(config), *flags])
    assert result.exit_code == 0, result.output
    assert [(p.on_start, p.take_over) for p in seen] == [(on_start, take_over)]


async def test_without_settings_it_checks_the_cluster_kubectl_talks_to(cluster, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig_path))
    cluster.add("apiservices", PROMETHEUS_ADAPTER)
    result = await preflight()
    # The default settings: auth.mode kubernetes and no Kubernetes inputs.
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [
        f"problem apiservice {APISERVICE}",
        "ok      configmap kube-system/extension-apiserver-authentication",
        f"ok      rbac get apiservices.apiregistration.k8s.io/{APISERVICE}",
        "ok      rbac get,list,watch configmaps/extension-apiserver-authentication in namespace kube-system",
        "ok      rbac create tokenreviews.authentication.k8s.io",
        "ok      rbac create subjectaccessreviews.authorization.k8s.io",
    ]
    assert_runtime_failure(result, "preflight: 1 of 6 checks found a problem")


# --- the CapacityBuffer writer's requirements -----------------------------------------------------------


@pytest.fixture
def buffer_config(config: Path) -> Callable[[bool], Path]:
    def write(dry_run: bool) -> Path:
        document = yaml.safe_load(config.read_text())
        document |= {
            "prometheus": {"url": "http://127.0.0.1:9"},
            "signals": [{"name": "gpus", "preset": "gpus_requested"}],
            "metrics": {"gpu_headroom": {"signal": "gpus", "kind": "headroom"}},
            "actuators": {"capacity_buffers": {
                "dry_run": dry_run,
                "pools": [{"pool": "a100", "namespace": "gpu", "name": "a100-buffer", "gpus_per_chunk": 8}],
            }},
        }  # fmt: skip
        config.write_text(yaml.safe_dump(document))
        return config

    return write


async def test_buffer_writer_needs_its_permissions_and_the_crd_in_either_version(cluster, buffer_config):
    result = await preflight("--config", str(buffer_config(False)))
    lines = result.stdout.splitlines()
    needed = "(needed by actuators.capacity_buffers)"
    assert (
        "ok      rbac get,list,watch,create,patch capacitybuffers.autoscaling.x-k8s.io in namespace gpu: "
        f"allowed {needed}" in lines
    )
    assert f"ok      rbac get,create podtemplates in namespace gpu: allowed {needed}" in lines
    assert lines[-1] == f"ok      crd capacitybuffers.autoscaling.x-k8s.io/v1beta1: served {needed}"
    cluster.served_versions["capacitybuffers"] = ("v1alpha1",)  # Cluster Autoscaler's deprecated version only
    result = await preflight("--config", str(buffer_config(False)))
    assert result.stdout.splitlines()[-1] == (
        f"ok      crd capacitybuffers.autoscaling.x-k8s.io/v1beta1: served as v1alpha1 only {needed}"
    )
    assert result.exit_code == 0
    cluster.installed.discard("capacitybuffers")
    result = await preflight("--config", str(buffer_config(False)))
    assert result.stdout.splitlines()[-1].startswith(
        "problem crd capacitybuffers.autoscaling.x-k8s.io/v1beta1: not served by the API; needed by "
        "actuators.capacity_buffers: enable CapacityBuffers (Karpenter: FEATURE_GATES CapacityBuffer=true"
    )
    assert result.exit_code == 1


async def test_a_dry_run_needs_only_to_read_buffers(cluster, buffer_config):
    cluster.ssar_rule = lambda spec: spec["resourceAttributes"]["verb"] in ("get", "list", "watch", "create")
    result = await preflight("--config", str(buffer_config(True)))
    lines = [line for line in result.stdout.splitlines() if "capacitybuffers" in line or "podtemplates" in line]
    assert lines == [
        "ok      rbac list,watch capacitybuffers.autoscaling.x-k8s.io in namespace gpu: allowed "
        "(needed by actuators.capacity_buffers)",
        "ok      crd capacitybuffers.autoscaling.x-k8s.io/v1beta1: served (needed by actuators.capacity_buffers)",
    ]
    assert not any("leases" in line for line in result.stdout.splitlines())
