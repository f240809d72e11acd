"""The autoscaler's CapacityBuffer sizing rule as of July 2026, on kubernetes/autoscaler's own cases
(``capacitybuffer/translators/replicas_test.go`` at e189499d50: a chunk requesting 1 CPU) and on the
writer's GPU chunks."""

from __future__ import annotations

import pytest

from autoscaler.actuation.buffer_sizing import BufferState, Condition, Sizing, chunks_within, upstream_sizing
from tests.autoscaler.buffer_helpers import buffer_settings

CPU_CHUNK = {"cpu": 1.0}


@pytest.mark.parametrize(
    ("spec", "scalable", "expected"),
    [
        ({"replicas": 5}, None, 5),  # only replicas
        ({"percentage": 200}, 10, 20),  # only percentage: 200 % of 10
        ({"replicas": 25, "percentage": 200}, 10, 25),  # both: the larger (before July 2026: the smaller)
        ({"replicas": 15, "percentage": 200}, 10, 20),
        ({"replicas": 25, "limits": {"cpu": "20"}}, None, 20),  # limits cap
        ({"replicas": 15, "limits": {"cpu": "20"}}, None, 15),
        ({"percentage": 250, "limits": {"cpu": "20"}}, 10, 20),
        ({"limits": {"cpu": "20"}}, None, 20),  # only limits: as many as fit
        ({"percentage": 33}, 10, 4),  # rounded up: ceil(3.3) (before: down to 3)
        ({"percentage": 50}, 0, 0),
        ({"percentage": 0, "replicas": 0}, 10, 0),
    ],
)
def test_upstream_cases(spec, scalable, expected):
    assert upstream_sizing(spec, CPU_CHUNK, scalable).replicas == expected


@pytest.mark.parametrize(
    ("spec", "scalable"),
    [({}, None), ({"percentage": 200}, None), ({"limits": {"memory": "1Gi"}}, None)],
)
def test_specs_the_autoscaler_refuses(spec, scalable):
    assert upstream_sizing(spec, CPU_CHUNK, scalable).replicas is None


def test_gpu_chunks_and_reasons():
    gpus = {"nvidia.com/gpu": 8}
    assert upstream_sizing({"replicas": 3}, gpus) == Sizing(3, "spec.replicas 3")
    # The writer's buffers name a PodTemplate: a percentage without a scalableRef does not count.
    assert upstream_sizing({"replicas": 3, "percentage": 500}, gpus) == Sizing(3, "spec.replicas 3")
    assert upstream_sizing({"replicas": 3, "limits": {"nvidia.com/gpu": "23"}}, gpus) == Sizing(
        2, "spec.replicas 3, capped by spec.limits nvidia.com/gpu=23"
    )
    assert upstream_sizing({"limits": {"nvidia.com/gpu": 16, "cpu": "4"}}, gpus) == Sizing(
        2, "as many as fit in spec.limits nvidia.com/gpu=16"
    )
    assert upstream_sizing({"replicas": 1, "percentage": 150}, gpus, 3) == Sizing(5, "ceil(150 % of 3 replicas)")


def test_chunks_within_compares_milli_units():
    assert chunks_within(2.0, 0.1) == 20
    assert chunks_within(0.3, 0.1) == 3  # 0.3 / 0.1 is 2.9999999999999996 in floats
    assert chunks_within(7.0, 8.0) == 0


def test_limited_by_quotas_is_the_condition_of_that_type():
    state = BufferState(buffer_settings().pools[0])
    assert state.limited_by_quotas is None
    quota = Condition("LimitedByQuotas", "True", "ResourceQuotasAllocated", "Buffer replicas limited from 4 to 2")
    state.conditions = (Condition("ReadyForProvisioning", "True", "AttributesSetSuccessfully", "ready"), quota)
    assert state.limited_by_quotas == quota
