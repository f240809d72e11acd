"""actuators.capacity_buffers: bad settings are refused with an error naming the field and the fault."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from autoscaler.config.settings_loader import SettingsError, load_settings

SERVED = (
    "prometheus: {url: 'http://p:9090'}\n"
    "signals:\n  - {name: gpus, preset: gpus_requested}\n"
    "metrics:\n  gpu_headroom: {signal: gpus, kind: headroom}\n"
)
POOL = "{pool: a100, namespace: gpu, name: a100-buffer, gpus_per_chunk: 8}"


def write(tmp_path, text: str):
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return path


def test_a_pool_with_defaults(tmp_path):
    settings = load_settings(
        write(tmp_path, SERVED + f"actuators:\n  capacity_buffers:\n    pools: [{POOL}]\n"), environ={}
    )
    buffers = settings.actuators.capacity_buffers
    assert buffers is not None and not buffers.dry_run
    (pool,) = buffers.pools
    assert (pool.metric, pool.series_labels, pool.template_name) == (
        "gpu_headroom",
        {"nodepool": "a100"},
        "a100-buffer-chunk",
    )
    assert (buffers.lease.name, buffers.lease.lease_duration, buffers.lease.retry_period) == (
        "gpu-autoscaler-actuator", timedelta(seconds=15), timedelta(seconds=2),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            "pools: [{pool: a100, namespace: gpu, name: b, gpus_per_chunk: 0}]",
            "actuators.capacity_buffers.pools.0.gpus_per_chunk: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            "pools: []",
            "actuators.capacity_buffers: Value error, pools must name at least one pool",
        ),
        (
            "pools: [{pool: a100, namespace: gpu, name: b, gpus_per_chunk: 8, metric: gpu_demand}]",
            "actuators.capacity_buffers.pools[0].metric 'gpu_demand' is not a served metric (gpu_headroom)",
        ),
        (
            f"pools: [{POOL}, {POOL}]",
            "each pool may have one CapacityBuffer; repeated: a100",
        ),
        (
            "pools: [{pool: a100, namespace: gpu, name: A100_Buffer, gpus_per_chunk: 8}]",
            "name 'A100_Buffer' is not a valid Kubernetes name",
        ),
        (
            f"pools: [{POOL}]\n    lease: {{lease_duration: 10s, renew_deadline: 10s}}",
            "lease durations must satisfy lease_duration > renew_deadline > retry_period > 0",
        ),
        (
            f"pools: [{POOL}]\n    dryrun: true",
            "actuators.capacity_buffers.dryrun: unknown field (got True)",
        ),
        (
            "pools: [{pool: a, namespace: gpu, name: b, gpus_per_chunk: 8,"
            " tolerations: [{key: k, operator: Exists, value: v}]}]",
            "a toleration with operator Exists takes no value",
        ),
    ],
)
def test_bad_buffer_settings_name_the_field_and_fault(tmp_path, section, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings(write(tmp_path, SERVED + f"actuators:\n  capacity_buffers:\n    {section}\n"), environ={})
    assert expected in str(caught.value)


def test_the_demo_takes_buffers_only_as_a_dry_run(tmp_path):
    text = f"demo: {{enabled: true}}\nactuators:\n  capacity_buffers:\n    pools: [{POOL}]\n"
    with pytest.raises(SettingsError, match=r"actuators\.capacity_buffers in demo mode needs dry_run: true"):
        load_settings(write(tmp_path, text), environ={})
    dry = text.replace("pools:", "dry_run: true\n    pools:")
    assert load_settings(write(tmp_path, dry), environ={}).actuators.capacity_buffers.dry_run


def test_the_documented_example_is_valid_settings(tmp_path):
    page = (Path(__file__).resolve().parents[2] / "docs" / "pre-provisioning.md").read_text()
    section = page.split("## Pre-provisioning with CapacityBuffers", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    buffers = load_settings(write(tmp_path, SERVED + block), environ={}).actuators.capacity_buffers
    assert buffers is not None and buffers.dry_run
    assert [(p.pool, p.namespace, p.name, p.template_name) for p in buffers.pools] == [
        ("gpu", "gpu-placeholders", "gpu-buffer", "gpu-buffer-chunk")
    ]
