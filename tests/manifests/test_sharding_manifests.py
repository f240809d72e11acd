"""The base runs sharded: two replicas spread across nodes, a PodDisruptionBudget, the Lease RBAC the
shard owners use (adapters/kubernetes/shard_leases.py, adapters/kubernetes/leases.py) and a config that shards."""

from __future__ import annotations

import pytest

from autoscaler.config.settings_loader import load_settings
from tests.manifests import test_manifests
from tests.manifests.test_manifests import one, render

config_file = test_manifests.config_file  # the service's config.yaml from a render's ConfigMap

pytestmark = pytest.mark.kubectl

SA = {"kind": "ServiceAccount", "name": "gpu-autoscaler", "namespace": "gpu-autoscaler"}


def test_the_base_config_shards_and_serves_from_the_objects(config_file):
    publication = load_settings(config_file("base"), environ={}).publication
    assert publication.enabled and publication.publish and publication.serve_from == "objects"
    sharding = publication.sharding
    assert sharding.enabled
    assert [t.total_seconds() for t in (sharding.lease_duration, sharding.renew_deadline, sharding.retry_period)] == [
        15, 10, 2
    ]  # fmt: skip


def test_the_service_may_do_with_leases_what_shard_owners_do_in_its_namespace(config_file):
    namespace = load_settings(config_file("base"), environ={}).publication.namespace
    role = one("base", "Role", "gpu-autoscaler:shard-leases")
    assert role["metadata"]["namespace"] == namespace
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
              for v in rule["verbs"]}  # fmt: skip
    # list: one request a round; get: a release re-reads; create/update: acquire, renew, release;
    # delete: membership Leases of replicas that stopped or are gone.
    verbs = ("get", "list", "watch", "create", "update", "patch", "delete")
    assert grants == {("coordination.k8s.io", "leases", verb) for verb in verbs}
    assert not any("resourceNames" in rule for rule in role["rules"])  # member Leases are named per pod
    binding = one("base", "RoleBinding", "gpu-autoscaler:shard-leases")
    assert binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [SA]


def test_two_replicas_spread_across_nodes_with_a_disruption_budget_and_their_pod_name():
    deployment = one("base", "Deployment", "gpu-autoscaler")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    by_host = [c for c in pod["topologySpreadConstraints"] if c["topologyKey"] == "kubernetes.io/hostname"]
    assert len(by_host) == 1 and by_host[0]["maxSkew"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert by_host[0]["labelSelector"]["matchLabels"].items() <= labels.items()
    pdb = one("base", "PodDisruptionBudget", "gpu-autoscaler")["spec"]
    assert pdb["minAvailable"] == 1 and pdb["selector"]["matchLabels"].items() <= labels.items()
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_the_lease_rbac_is_in_the_base_render_once():
    kinds = [(doc["kind"], doc["metadata"]["name"]) for doc in render("base")]
    assert kinds.count(("Role", "gpu-autoscaler:shard-leases")) == 1
    assert kinds.count(("RoleBinding", "gpu-autoscaler:shard-leases")) == 1
