"""The preflight's Kueue line, against the fake API: Kueue found and read (in v1beta2, or v1beta1 where
only that is served), not installed (fine: nothing is queued through it), or found but not readable;
and the RBAC lines of the four resources the service lists."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.autoscaler.test_preflight import CLUSTER_ROLE_FIX, preflight
from tests.cli_helpers import assert_runtime_failure
from tests.fakekube import FakeKube

KUEUE = ("workloads", "localqueues", "clusterqueues", "resourceflavors", "admissionchecks")


@pytest.fixture
def kueue_config(fake_kube: FakeKube, tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    document = {
        "kubernetes": {"kubeconfig": str(fake_kube.kubeconfig_path)},
        "server": {"bind_address": "127.0.0.1"},
        "auth": {"mode": "none"},
        "inputs": {"cronjobs": False, "nodeclaims": False, "nodepools": False, "pending_pods": False},
        "state_dir": str(tmp_path / "state"),
    }
    path.write_text(yaml.safe_dump(document))
    return path


async def test_kueue_found_and_read(fake_kube, kueue_config):
    result = await preflight("--config", str(kueue_config))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for plural in KUEUE:
        assert f"ok      rbac list,watch {plural}.kueue.x-k8s.io: allowed (needed by inputs.kueue)" in lines
    assert lines[-1] == "ok      kueue: found (kueue.x-k8s.io/v1beta2) and read: queued Workloads count as GPU demand"


async def test_kueue_serving_only_v1beta1_is_read_through_it(fake_kube, kueue_config):
    for plural in KUEUE:
        fake_kube.served_versions[plural] = ("v1beta1",)
    result = await preflight("--config", str(kueue_config))
    assert result.stdout.splitlines()[-1].startswith("ok      kueue: found (kueue.x-k8s.io/v1beta1) and read")


async def test_kueue_not_installed_is_said_and_is_no_problem(fake_kube, kueue_config):
    fake_kube.installed -= set(KUEUE)
    result = await preflight("--config", str(kueue_config))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "ok      kueue: not found (kueue.x-k8s.io serves no workloads): no Workload is counted as queued GPU "
        "demand (inputs.kueue)"
    )


async def test_kueue_found_but_forbidden_is_a_problem_with_the_fix(fake_kube, kueue_config):
    fake_kube.fail(status=403, plural="clusterqueues", times=None)
    result = await preflight("--config", str(kueue_config))
    last = result.stdout.splitlines()[-1]
    assert last.startswith("problem kueue: found but not read (list clusterqueues.kueue.x-k8s.io: ")
    assert last.endswith(f"needed by inputs.kueue: {CLUSTER_ROLE_FIX}")
    assert_runtime_failure(result, "preflight: 1 of 8 checks found a problem")  # 5 rbac lines of Kueue among them


async def test_kueue_off_checks_nothing_of_it(fake_kube, kueue_config):
    document = yaml.safe_load(kueue_config.read_text())
    document["inputs"]["kueue"] = False
    kueue_config.write_text(yaml.safe_dump(document))
    result = await preflight("--config", str(kueue_config))
    assert "kueue" not in result.stdout
