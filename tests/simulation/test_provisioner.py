"""The Karpenter-like node pool: lead time, batching, consolidation; and lead-time distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.simulation.lead_times import empirical_distribution, parse_lead_time_distribution
from autoscaler.simulation.pool_set import PoolSet, PoolSetConfig
from autoscaler.simulation.pools import Scarcity, single_pool
from autoscaler.simulation.provisioner import NodePool, PoolConfig

FIXED_5M = parse_lead_time_distribution("fixed:5m")


def _pool(ready: int = 0, consolidate_after_s: float = 600.0) -> NodePool:
    return NodePool(PoolConfig(gpus_per_node=8, lead_time=FIXED_5M, consolidate_after_s=consolidate_after_s), ready)


def _run_until(pool: NodePool, until: float, wanted: float) -> None:
    """Drive the pool through its own events with a constant number of GPUs wanted."""
    now = 0.0
    while now <= until:
        pool.turn_ready(now)
        pool.provision(now, wanted)
        now = pool.next_event()
        if math.isinf(now):
            break


def test_node_ready_after_batch_and_lead_time():
    pool = _pool()
    pool.provision(0.0, 3)  # a Pending pod opens a batch that closes 1 s later
    assert pool.next_event() == 1.0
    pool.provision(1.0, 3)
    assert pool.launches == 1
    assert pool.launching == 1
    assert pool.next_event() == 301.0  # 1 s batch + 5 min lead time
    pool.turn_ready(300.9)
    assert pool.ready == 0
    pool.turn_ready(301.0)
    assert (pool.ready, pool.launching, pool.capacity) == (1, 0, 8)


def test_launches_only_what_ready_and_launching_nodes_cannot_hold():
    pool = _pool(ready=2)
    pool.provision(0.0, 16)
    assert pool.next_event() == math.inf  # fits on Ready nodes: no batch
    pool.provision(0.0, 17)
    pool.provision(1.0, 17)
    assert pool.launches == 1
    pool.provision(2.0, 24)  # the launching node already covers it
    assert pool.next_event() == 301.0
    pool.provision(3.0, 33)
    pool.provision(4.0, 33)
    # 3 nodes Ready or launching hold 24 GPUs: 9 more need ceil(9 / 8) = 2 more nodes.
    assert pool.launches == 3
    assert pool.launching == 3


def test_batch_extends_with_new_pending_pods_up_to_ten_seconds():
    pool = _pool()
    wanted = 0.0
    for tick in np.arange(0.0, 9.6, 0.5):  # a new Pending pod every 0.5 s
        wanted += 1
        pool.provision(float(tick), wanted)
        assert pool.launches == 0
    assert pool.next_event() == 10.0  # capped at 10 s after the first pod
    pool.provision(10.0, wanted)
    assert pool.launches == math.ceil(wanted / 8)
    # Pods that stop arriving close the batch 1 s after the last one.
    pool = _pool()
    pool.provision(0.0, 1)
    pool.provision(0.6, 2)
    assert pool.next_event() == pytest.approx(1.6)


def test_batch_that_is_no_longer_needed_launches_nothing():
    pool = _pool()
    pool.provision(0.0, 5)
    pool.provision(1.0, 0)  # the pods went away before the batch closed
    assert pool.launches == 0


def test_empty_node_removed_after_consolidate_after():
    pool = _pool(ready=3)
    pool.track_empty(0.0, free_gpus=8)  # one node's worth of GPUs is free: one empty node
    assert pool.next_event() == 600.0
    pool.track_empty(599.0, free_gpus=8)
    assert pool.ready == 3
    pool.track_empty(600.0, free_gpus=8)
    assert pool.ready == 2
    assert pool.next_event() == math.inf


@pytest.mark.parametrize("pool_kind", ["one pool", "pool set"])
def test_an_empty_node_goes_at_the_moment_its_timer_names_whatever_the_rounding(pool_kind):
    # 582.4595107980946 + 600 - 600 rounds below 582.4595107980946: a node empty since then, a
    # fractional moment a drawn lead time brings, went at no moment and the loop waited for ever.
    empty_at = 582.4595107980946
    assert (empty_at + 600.0) - 600.0 < empty_at
    if pool_kind == "one pool":
        pool: NodePool | PoolSet = _pool(ready=1)
    else:
        spec = single_pool(8, FIXED_5M, spot=False, price=None)
        pool = PoolSet(PoolSetConfig(spec, Scarcity(), consolidate_after_s=600.0), ready_gpus=8.0)
    pool.track_empty(empty_at, 8.0)
    moment = pool.next_event()
    assert moment == empty_at + 600.0
    pool.track_empty(moment, 8.0)
    assert pool.capacity == 0 and pool.next_event() == math.inf


def test_refilled_node_is_no_longer_empty():
    pool = _pool(ready=3)
    pool.track_empty(0.0, free_gpus=16)  # two empty nodes since 0 s
    pool.track_empty(100.0, free_gpus=12)  # a pod arrived: one node is used again
    pool.track_empty(400.0, free_gpus=16)  # and left: that node is empty since 400 s
    pool.track_empty(600.0, free_gpus=16)
    assert pool.ready == 2  # the node empty since 0 s went
    pool.track_empty(999.0, free_gpus=8)
    assert pool.ready == 2
    pool.track_empty(1000.0, free_gpus=8)
    assert pool.ready == 1


def test_idle_pool_scales_nothing():
    pool = _pool()
    _run_until(pool, 3600.0, 0.0)
    assert pool.launches == 0


def test_lead_time_distributions():
    rng = np.random.default_rng(0)
    lognormal = parse_lead_time_distribution("lognormal:median=5m,p95=8m")
    draws = np.array([lognormal.sample(rng) for _ in range(20_000)])
    assert np.median(draws) == pytest.approx(300, rel=0.03)
    assert np.percentile(draws, 95) == pytest.approx(480, rel=0.03)
    assert lognormal.quantile(0.95) == pytest.approx(480)
    uniform = parse_lead_time_distribution("uniform:min=3m,max=6m")
    draws = np.array([uniform.sample(rng) for _ in range(2_000)])
    assert draws.min() >= 180 and draws.max() <= 360
    assert FIXED_5M.sample(rng) == FIXED_5M.quantile(0.999) == 300


def test_an_empirical_distribution_draws_between_the_lead_times_measured():
    measured = parse_lead_time_distribution("empirical:10m,8m,9m")
    assert measured.values == (480.0, 540.0, 600.0)  # sorted, at levels 0, 0.5 and 1
    assert (measured.quantile(0.0), measured.quantile(0.25), measured.quantile(0.5)) == (480.0, 510.0, 540.0)
    draws = [measured.sample(np.random.default_rng(0)) for _ in range(2)]
    assert draws[0] == draws[1] and 480 <= draws[0] <= 600  # a seeded generator repeats
    assert empirical_distribution([540.0, 480.0]).text == "empirical:480s,540s"
    with pytest.raises(ValueError, match="positive lead times"):
        empirical_distribution([])


@pytest.mark.parametrize(
    "text",
    [
        "",
        "fixed",
        "fixed:soon",
        "gamma:5m",
        "lognormal:median=5m",
        "lognormal:median=5m,p95=4m",
        "uniform:min=3m",
        "empirical:",
        "empirical:5m,soon",
    ],
)
def test_bad_lead_time_distributions(text):
    with pytest.raises(ValueError, match="lead-time distribution"):
        parse_lead_time_distribution(text)
