"""Several pools, launch failures, spot interruptions and cost per pool (#28), on small synthetic
workloads whose outcome is worked out by hand. Random draws come from the pool set's generator
(``numpy.random.default_rng(seed)``); the draws each test relies on are written next to it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autoscaler.simulation.forecasting import ForecastCadence
from autoscaler.simulation.inputs import Pods, make_workload
from autoscaler.simulation.lead_times import parse_lead_time_distribution
from autoscaler.simulation.policies import parse_policies
from autoscaler.simulation.pool_set import PoolSet, PoolSetConfig
from autoscaler.simulation.pools import PoolSpec, Scarcity, load_pools, single_pool
from autoscaler.simulation.report import _sweep_figures, build_report
from autoscaler.simulation.runner import SimulationConfig, SimulationResult, simulate

ORIGIN = pd.Timestamp("2024-03-01T00:00:00Z")
HOUR = 3600.0


def _pool(name: str, weight: int, gpus: int = 8, **extra: object) -> PoolSpec:
    return PoolSpec.model_validate(
        {"name": name, "weight": weight, "gpus_per_node": gpus, "lead_time": "fixed:5m"} | extra
    )


def _config(
    pools: tuple[PoolSpec, ...] | None, scarcity: Scarcity | None = None, **changes: object
) -> SimulationConfig:
    config = SimulationConfig(
        gpus_per_node=8,
        lead_time_s=300.0,
        lead_margin_s=30.0,
        warmup_s=HOUR,
        lead_distribution=parse_lead_time_distribution("fixed:5m"),
        consolidate_after_s=600.0,
        cadence=ForecastCadence(),
        pools=pools,
        scarcity=scarcity or Scarcity(),
    )
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]


def _run(base: np.ndarray, config: SimulationConfig, pods: Pods | None = None) -> SimulationResult:
    workload = make_workload("synthetic", ORIGIN, 60.0, base.astype(np.float64), pods or Pods.empty(), ())
    return simulate(workload, parse_policies("reactive"), config)


def test_one_pool_without_scarcity_runs_as_the_plain_pool():
    base = np.r_[np.full(120, 80.0), np.full(120, 160.0)]  # +80 GPUs at 2 h
    plain = _run(base, _config(None)).runs["reactive"].outcome
    pooled = _run(base, _config(single_pool(8, parse_lead_time_distribution("fixed:5m"), spot=False, price=None)))
    outcome = pooled.runs["reactive"].outcome
    assert outcome.totals == plain.totals
    assert outcome.totals.short == 80 * 301  # the 1 s batch, then 300 s
    assert outcome.pools["default"]["node_launches"] == 10


def test_a_failed_launch_is_retried_by_the_next_batch():
    # Seed 3 draws 0.0856 (< 0.1: the launch fails), then 0.2368 (it succeeds).
    base = np.r_[np.full(120, 80.0), np.full(120, 88.0)]  # +8 GPUs at 2 h: one node
    one = (_pool("only", 0),)
    outcome = _run(base, _config(one, Scarcity(launch_failure_rate=0.1), seed=3)).runs["reactive"].outcome
    # Batch 7200 to 7201, the launch fails; a new batch closes at 7202; Ready at 7502.
    assert outcome.totals.short == 8 * 302
    assert outcome.pools["only"] == {
        "gpu_hours": pytest.approx(80 * 3 + 8 * (2 * HOUR - 2) / HOUR),  # scored from 1 h to 4 h
        "cost": 0.0,
        "node_launches": 1,
        "failed_launches": 1,
        "spot_interruptions": 0,
    }


def test_a_failed_launch_falls_back_to_the_next_pool_by_weight():
    # Seed 3: the first launch (in "first") fails, the next two (in "second") succeed.
    base = np.r_[np.full(120, 80.0), np.full(1, 88.0), np.full(119, 96.0)]  # +8 at 2 h, +8 a minute later
    pools = (_pool("first", 100, limit_gpus=200), _pool("second", 10))
    outcome = _run(base, _config(pools, Scarcity(launch_failure_rate=0.1), seed=3)).runs["reactive"].outcome
    # "first" is passed over for 180 s: both launches (7201 and 7261) go to "second", Ready 300 s later.
    assert outcome.totals.short == 8 * 301 * 2
    assert outcome.pools["first"]["failed_launches"] == 1
    assert outcome.pools["first"]["node_launches"] == 0
    assert outcome.pools["second"]["node_launches"] == 2
    assert outcome.pools["second"]["gpu_hours"] == pytest.approx(8 * (2 * HOUR - 1) / HOUR + 8 * (2 * HOUR - 61) / HOUR)


def test_launches_go_to_the_heaviest_pool_within_its_limit_then_the_next():
    pools = (_pool("heavy", 100, limit_gpus=16), _pool("light", 10, gpus=4))
    pool_set = PoolSet(PoolSetConfig(pools, Scarcity(), consolidate_after_s=600.0))
    pool_set.provision(0.0, 30.0)  # opens a batch
    pool_set.provision(1.0, 30.0)  # closes it: 16 GPUs in "heavy" (its limit), 14 in "light" (4 nodes)
    assert [len(pool.launching) for pool in pool_set.pools] == [2, 4]
    assert pool_set.held_gpus == 32
    pool_set.turn_ready(301.0)
    assert pool_set.capacity == 32


def test_a_spot_interruption_pends_the_pods_again_after_the_notice():
    # One spot pool, 1 interruption per node-hour, seed 0: the first node's notice comes
    # 2447.75 s after it is Ready, the replacement's 3670.55 s after.
    pods = Pods(np.array([100.0]), np.array([3000.0]), np.array([8]), np.array([False]))
    spot = single_pool(8, parse_lead_time_distribution("fixed:5m"), spot=True, price=2.0)
    config = _config(spot, Scarcity(spot_interruptions_per_node_hour=1.0), warmup_s=0.0)
    outcome = _run(np.zeros(120), config, pods).runs["reactive"].outcome
    notice = 401.0 + 2447.754854  # the pod Pending from 100 s, its node Ready at 401 s
    # The replacement launches at the notice (batch closes 1 s later) and is Ready at notice + 301 s;
    # the pod runs on the cordoned node until notice + 120 s, then waits 181 s.
    assert outcome.pod_waits == pytest.approx([301.0 + 181.0])
    assert outcome.pools["default"]["spot_interruptions"] == 1
    assert outcome.pools["default"]["node_launches"] == 2
    # It ran 401 s to notice + 120 s, then what it had left from notice + 301 s; the replacement
    # stays until it has been empty for 600 s.
    finish = notice + 301.0 + (3000.0 - (notice + 120.0 - 401.0))
    held = (notice + 120.0 - 101.0) + (finish + 600.0 - (notice + 1.0))
    assert outcome.pools["default"]["gpu_hours"] == pytest.approx(8 * held / HOUR, rel=1e-6)


def test_cost_is_each_pools_gpu_hours_times_its_price():
    pools = (_pool("a", 100, limit_gpus=16, price_per_gpu_hour=2.0), _pool("b", 10, gpus=4, price_per_gpu_hour=5.0))
    result = _run(np.full(120, 24.0), _config(pools))  # 2 h, scored from 1 h: 16 GPUs in a, 8 in b
    report = build_report(result, input_name="synthetic", pods=False, gpu_hour_price=None)
    figures = report["policies"]["reactive"]
    assert figures["cost"] == 16 * 2.0 + 8 * 5.0
    assert figures["pools"]["a"]["cost"] == 32.0
    assert figures["pools"]["b"]["gpu_hours"] == 8.0
    assert figures["provisioned_gpu_hours"] == 24.0
    assert [pool["name"] for pool in report["pools"]] == ["a", "b"]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pools.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pools:\n  - {name: a, lead_time: fixed:5m}", "pools.0.gpus_per_node: Field required"),
        (
            "pools:\n  - {name: a, gpus_per_node: 8, lead_time: fixed:5m, capacity_type: reserved}",
            "pools.0.capacity_type: Input should be 'on-demand' or 'spot'",
        ),
        (
            "pools:\n  - {name: a, gpus_per_node: 8, lead_time: fixed:5m}\n"
            "  - {name: b, gpus_per_node: 8, lead_time: soon}",
            "pools.1.lead_time: Value error, lead-time distribution 'soon'",
        ),
        ("pools:\n  - {name: a, gpus_per_node: 8, lead_time: fixed:5m, price: 3}", "pools.0.price: unknown field"),
        (
            "pools:\n  - {name: a, gpus_per_node: 8, lead_time: fixed:5m, price_per_gpu_hour: -1}",
            "pools.0.price_per_gpu_hour: Input should be greater than or equal to 0",
        ),
        (
            "pools:\n  - {name: a, gpus_per_node: 8, lead_time: fixed:5m}\n"
            "  - {name: a, gpus_per_node: 4, lead_time: fixed:5m}",
            "pools: Value error, pool names must be unique, repeated: a",
        ),
        ("pools: []", "pools: List should have at least 1 item"),
    ],
)
def test_a_bad_pools_file_names_the_field(tmp_path: Path, text: str, message: str):
    with pytest.raises(ValueError, match="invalid pools file") as raised:
        load_pools(_write(tmp_path, text))
    assert message in str(raised.value)


def test_pools_come_in_karpenters_order(tmp_path: Path):
    text = (
        "pools:\n  - {name: a, weight: 10, gpus_per_node: 8, lead_time: fixed:5m}\n"
        "  - {name: b, weight: 50, gpus_per_node: 8, lead_time: fixed:5m, capacity_type: spot}\n"
        "  - {name: c, weight: 10, gpus_per_node: 4, lead_time: 'lognormal:median=5m,p95=8m'}\n"
    )
    assert [pool.name for pool in load_pools(_write(tmp_path, text))] == ["b", "c", "a"]


def test_scarcity_is_checked():
    with pytest.raises(ValueError, match="--launch-failure-rate"):
        Scarcity(launch_failure_rate=1.0)
    with pytest.raises(ValueError, match="--spot-interruptions"):
        Scarcity(spot_interruptions_per_node_hour=-1.0)


def test_a_sweeps_runs_report_their_cost_with_pools():
    pools = (_pool("a", 100, limit_gpus=16, price_per_gpu_hour=2.0), _pool("b", 10, gpus=4, price_per_gpu_hour=5.0))
    outcome = _run(np.full(120, 24.0), _config(pools)).runs["reactive"].outcome
    plain = _run(np.full(120, 24.0), _config(None)).runs["reactive"].outcome
    assert _sweep_figures({"static_buffer:0": outcome})["static_buffer:0"]["cost"] == 72.0
    assert "cost" not in _sweep_figures({"static_buffer:0": plain})["static_buffer:0"]
