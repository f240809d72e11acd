"""The CapacityBuffer writer against the fake API and the real kubernetes-asyncio client: it creates
or adopts each pool's buffer, writes spec.replicas only when the value changes, retries a 409 from a
fresh read, follows the served version, writes nothing in a dry run or without the Lease."""

from __future__ import annotations

import pytest

from tests import fakekube
from tests.autoscaler.buffer_helpers import (
    GROUP,
    PLURAL,
    buffer_settings,
    headroom,
    running_writer,
    show,
    writes,
)
from tests.eventually import eventually

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api


def stored_replicas(fake_kube) -> int | None:
    stored = fake_kube.get(PLURAL, "a100-buffer", "gpu")
    return None if stored is None else stored["spec"]["replicas"]


@pytest.mark.looptime
async def test_creates_the_buffer_and_its_chunk_template_then_writes_only_on_change(fake_kube, kube_api):
    async with running_writer(buffer_settings(), kube_api) as writer:
        await eventually(lambda: writer.mode == "writing", message="the writer holds the Lease")
        writer.on_snapshot(headroom(12.5))  # ceil(12.5 / 8) = 2 chunks
        await eventually(lambda: stored_replicas(fake_kube) == 2, message="buffer created with 2 replicas")
        buffer = fake_kube.get(PLURAL, "a100-buffer", "gpu")
        assert buffer["apiVersion"] == f"{GROUP}/v1beta1"
        assert buffer["spec"] == {"podTemplateRef": {"name": "a100-buffer-chunk"}, "replicas": 2}
        assert buffer["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-autoscaler"}
        template = fake_kube.get("podtemplates", "a100-buffer-chunk", "gpu")["template"]["spec"]
        assert template["nodeSelector"] == {"karpenter.sh/nodepool": "a100"}
        assert template["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert template["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
        assert (writes(fake_kube, "POST"), writes(fake_kube, "PATCH")) == (1, 0)

        for value in (12.5, 9.0, 16.0):  # all still 2 chunks: nothing is sent, not even a read
            gets = writes(fake_kube, "GET")
            await show(writer, headroom(value))
            assert (writes(fake_kube, "GET"), writes(fake_kube, "PATCH")) == (gets, 0)

        writer.on_snapshot(headroom(17.0))  # 3 chunks
        await eventually(lambda: stored_replicas(fake_kube) == 3, message="patched to 3")
        writer.on_snapshot(headroom(0.0))
        await eventually(lambda: stored_replicas(fake_kube) == 0, message="patched to 0")
        await show(writer, headroom(0.0))
        assert writes(fake_kube, "PATCH") == 2
        assert writes(fake_kube, "POST", "podtemplates") == 1
        state = writer.states["a100"]
        assert (state.writes, state.written, state.last_error) == (3, 0, None)


@pytest.mark.looptime
async def test_an_existing_buffer_is_adopted_and_an_existing_template_kept(fake_kube, kube_api):
    fake_kube.add("podtemplates", {"metadata": {"name": "mine", "namespace": "gpu"},
                                   "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}})  # fmt: skip
    fake_kube.add(PLURAL, {"metadata": {"name": "a100-buffer", "namespace": "gpu"},
                           "spec": {"podTemplateRef": {"name": "mine"}, "replicas": 2}})  # fmt: skip
    async with running_writer(buffer_settings(), kube_api) as writer:
        await eventually(lambda: writer.mode == "writing", message="the writer holds the Lease")
        writer.on_snapshot(headroom(16.0))  # 2: already so, adopted without a write
        await eventually(lambda: writer.states["a100"].written == 2, message="writer.states['a100'].written == 2")
        assert writes(fake_kube, "PATCH") == 0
        writer.on_snapshot(headroom(40.0))
        await eventually(lambda: stored_replicas(fake_kube) == 5, message="stored_replicas(fake_kube) == 5")
    buffer = fake_kube.get(PLURAL, "a100-buffer", "gpu")
    assert buffer["spec"]["podTemplateRef"] == {"name": "mine"}  # only spec.replicas is written
    assert writes(fake_kube, "POST", "podtemplates") == 0
    assert fake_kube.get("podtemplates", "a100-buffer-chunk", "gpu") is None


@pytest.mark.looptime
async def test_a_409_conflict_is_retried_from_a_fresh_read(fake_kube, kube_api):
    fake_kube.add(PLURAL, {"metadata": {"name": "a100-buffer", "namespace": "gpu"},
                           "spec": {"podTemplateRef": {"name": "c"}, "replicas": 1}})  # fmt: skip
    fault = fake_kube.fail(status=409, method="PATCH", plural=PLURAL)
    async with running_writer(buffer_settings(), kube_api) as writer:
        await eventually(lambda: writer.mode == "writing", message="the writer holds the Lease")
        writer.on_snapshot(headroom(24.0))
        await eventually(lambda: stored_replicas(fake_kube) == 3, message="written after the conflict")
    assert fault.hits == 1
    patches = [r for r in fake_kube.requests_for(PLURAL, watch=False) if r.method == "PATCH"]
    assert [r.status for r in patches] == [409, 200]
    gets = [r for r in fake_kube.requests_for(PLURAL, watch=False) if r.method == "GET" and "a100-buffer" in r.path]
    assert len(gets) == 2  # one read before each attempt
    assert writer.states["a100"].last_error is None


@pytest.mark.looptime
async def test_a_concurrent_change_is_not_overwritten_blindly(fake_kube, kube_api):
    fake_kube.add(PLURAL, {"metadata": {"name": "a100-buffer", "namespace": "gpu"},
                           "spec": {"podTemplateRef": {"name": "c"}, "replicas": 1}})  # fmt: skip
    async with running_writer(buffer_settings(), kube_api) as writer:
        await eventually(lambda: writer.mode == "writing", message="the writer holds the Lease")
        writer.on_snapshot(headroom(8.0))
        await eventually(lambda: writer.states["a100"].written == 1, message="writer.states['a100'].written == 1")
        # Someone else changes the buffer: the writer's next write carries the resourceVersion it read.
        changed = fake_kube.get(PLURAL, "a100-buffer", "gpu")
        changed["spec"]["replicas"] = 7
        fake_kube.modify(PLURAL, changed)
        writer.on_snapshot(headroom(16.0))
        await eventually(lambda: stored_replicas(fake_kube) == 2, message="stored_replicas(fake_kube) == 2")
    assert [r.status for r in fake_kube.requests_for(PLURAL, watch=False) if r.method == "PATCH"] == [200]


@pytest.mark.looptime
async def test_a_cluster_serving_only_v1alpha1_gets_v1alpha1_buffers(fake_kube, kube_api):
    fake_kube.served_versions[PLURAL] = ("v1alpha1",)
    async with running_writer(buffer_settings(), kube_api) as writer:
        await eventually(lambda: writer.mode == "writing", message="the writer holds the Lease")
        assert writer.api_version == "v1alpha1"
        writer.on_snapshot(headroom(3.0))
        await eventually(lambda: writer.states["a100"].written == 1, message="writer.states['a100'].written == 1")
        writer.on_snapshot(headroom(9.0))
        await eventually(lambda: writer.states["a100"].written == 2, message="writer.states['a100'].written == 2")
    paths = {r.path for r in fake_kube.requests_for(PLURAL, watch=False) if r.method in ("POST", "PATCH")}
    assert paths == {f"/apis/{GROUP}/v1alpha1/namespaces/gpu/capacitybuffers",
                     f"/apis/{GROUP}/v1alpha1/namespaces/gpu/capacitybuffers/a100-buffer"}  # fmt: skip
    assert stored_replicas(fake_kube) == 2


@pytest.mark.looptime
async def test_without_the_crd_nothing_is_written_and_readiness_says_so(fake_kube, kube_api, caplog):
    fake_kube.installed.discard(PLURAL)
    async with running_writer(buffer_settings(), kube_api) as writer:
        await eventually(lambda: writer.discovered, message="discovery answered")
        writer.on_snapshot(headroom(30.0))  # computed and shown all the same
        assert writer.states["a100"].desired.replicas == 4
        assert writer.mode == "unavailable"
        assert writer.health() == {
            "capacity buffers": "warning: the cluster serves no CapacityBuffers (autoscaling.x-k8s.io v1beta1 or "
            "v1alpha1 capacitybuffers); nothing is written, everything else is served"
        }
    assert not fake_kube.requests_for(PLURAL)
    assert not fake_kube.requests_for("leases")
    assert "the cluster serves no CapacityBuffers (CRD capacitybuffers.autoscaling.x-k8s.io absent" in caplog.text


@pytest.mark.looptime
async def test_a_dry_run_computes_and_shows_but_writes_nothing(fake_kube, kube_api):
    fake_kube.add(PLURAL, {"metadata": {"name": "a100-buffer", "namespace": "gpu"},
                           "spec": {"podTemplateRef": {"name": "c"}, "replicas": 1}})  # fmt: skip
    async with running_writer(buffer_settings(dry_run=True), kube_api) as writer:
        await eventually(lambda: writer.discovered, message="discovery answered")
        for value in (20.0, 40.0):
            await show(writer, headroom(value))
        assert writer.states["a100"].desired.replicas == 5
        assert writer.mode == "dry-run"
        assert writer.elector is None
    assert {r.method for r in fake_kube.requests_for(PLURAL)} == {"GET"}  # the read-back watch only
    assert not fake_kube.requests_for("podtemplates")
    assert not fake_kube.requests_for("leases")
    assert stored_replicas(fake_kube) == 1


@pytest.mark.looptime
async def test_a_refused_write_is_shown_and_retried_at_the_next_refresh(fake_kube, kube_api):
    fake_kube.fail(status=403, method="POST", plural=PLURAL)
    async with running_writer(buffer_settings(), kube_api) as writer:
        await eventually(lambda: writer.mode == "writing", message="the writer holds the Lease")
        await show(writer, headroom(16.0))
        assert stored_replicas(fake_kube) is None
        line = writer.health()["capacity buffers"]
        assert line.startswith("failing: a100: create capacitybuffer gpu/a100-buffer: HTTP 403: "), line
        await show(writer, headroom(16.0))  # the same value, but nothing was written: tried again
        assert stored_replicas(fake_kube) == 2
        assert writer.states["a100"].last_error is None
        assert writer.health()["capacity buffers"].startswith("writing autoscaling.x-k8s.io/v1beta1")


@pytest.mark.looptime
async def test_a_buffer_deleted_by_someone_is_created_again(fake_kube, kube_api):
    async with running_writer(buffer_settings(), kube_api) as writer:
        await eventually(lambda: writer.mode == "writing", message="the writer holds the Lease")
        await show(writer, headroom(16.0))
        await eventually(lambda: writer.states["a100"].reported is None and stored_replicas(fake_kube) == 2,
                         message="created")  # fmt: skip
        fake_kube.delete(PLURAL, "a100-buffer", "gpu")
        await eventually(lambda: writer.states["a100"].written is None, message="the watch saw the deletion")
        await show(writer, headroom(16.0))
        assert stored_replicas(fake_kube) == 2
        assert writes(fake_kube, "POST") == 2
