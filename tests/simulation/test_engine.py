"""End-to-end runs on small synthetic workloads whose outcome can be computed by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoscaler.simulation.actuation import Actuation
from autoscaler.simulation.engine import Period, run_policy
from autoscaler.simulation.forecasting import ForecastCadence
from autoscaler.simulation.hpa import HPASpec
from autoscaler.simulation.inputs import Pods, expand_schedules, make_workload, parse_schedule
from autoscaler.simulation.lead_times import parse_lead_time_distribution
from autoscaler.simulation.policies import parse_policies
from autoscaler.simulation.provisioner import PoolConfig
from autoscaler.simulation.runner import SimulationConfig, SimulationResult, _Jobs, simulate

ORIGIN = pd.Timestamp("2024-03-01T00:00:00Z")
HOUR = 3600.0


def _config(
    warmup_s: float = HOUR, lead: str = "fixed:5m", consolidate_after_s: float = 600.0, margin_s: float = 30.0
) -> SimulationConfig:
    return SimulationConfig(
        gpus_per_node=8,
        lead_time_s=300.0,
        lead_margin_s=margin_s,
        warmup_s=warmup_s,
        lead_distribution=parse_lead_time_distribution(lead),
        consolidate_after_s=consolidate_after_s,
        cadence=ForecastCadence(),
    )


def _run(
    base: np.ndarray, policies: str, config: SimulationConfig, schedules: tuple[str, ...] = ()
) -> SimulationResult:
    specs = tuple(parse_schedule(text) for text in schedules)
    windows, pods = expand_schedules(specs, ORIGIN, len(base) * 60.0, 8)
    workload = make_workload("synthetic", ORIGIN, 60.0, base.astype(np.float64), pods, windows)
    return simulate(workload, parse_policies(policies), config)


def test_reactive_is_short_lead_time_times_the_increase():
    base = np.r_[np.full(120, 80.0), np.full(120, 160.0)]  # +80 GPUs at 2 h
    result = _run(base, "reactive,static_buffer:80,oracle", _config())
    reactive = result.runs["reactive"].outcome.totals
    # 80 GPUs Pending from the step until nodes launched after the 1 s batch are Ready 300 s later.
    assert reactive.short / 60 == pytest.approx(80 * 301 / 60, rel=1e-6)
    assert reactive.launches == 10
    assert result.runs["static_buffer:80"].outcome.totals.short == 0  # preempted placeholders made room
    assert result.runs["oracle"].outcome.totals.short == 0


def test_provisioned_and_idle_gpu_hours():
    base = np.r_[np.full(120, 160.0), np.full(120, 80.0)]  # -80 GPUs at 2 h
    result = _run(base, "reactive", _config(consolidate_after_s=600.0))
    totals = result.runs["reactive"].outcome.totals
    # Scored from 1 h to 4 h: 20 nodes for 1 h plus the 10 freed ones for consolidateAfter, 10 after.
    assert totals.provisioned / 3600 == pytest.approx(160 * 1 + 80 * 2 + 80 * 600 / 3600)
    assert totals.demand / 3600 == pytest.approx(160 + 80 * 2)
    assert (totals.provisioned - totals.used) / 3600 == pytest.approx(80 * 600 / 3600)
    assert totals.short == 0 and totals.launches == 0


@pytest.mark.parametrize("lead", ["fixed:5m", "uniform:min=2m,max=7m"])
def test_oracle_is_never_short(lead):
    rng = np.random.default_rng(7)
    jumps = rng.choice([0, 0, 0, 0, 8, -8, 24, -24, 60], size=600)
    base = np.clip(200 + np.cumsum(jumps), 0, 800).astype(np.float64)
    result = _run(base, "oracle,static_buffer:16,reactive", _config(lead=lead))
    assert result.runs["oracle"].outcome.totals.short == 0
    assert result.runs["reactive"].outcome.totals.short > result.runs["static_buffer:16"].outcome.totals.short > 0


def test_window_pods_wait_about_the_lead_time_under_reactive_and_little_when_planned():
    base = np.full(3 * 1440, 40.0)
    schedule = ("0 2 * * *;16;2h",)
    result = _run(base, "reactive,scheduled", _config(warmup_s=2 * HOUR), schedules=schedule)
    reactive = result.runs["reactive"].outcome.window_pod_waits
    assert len(reactive) == 3 * 2  # three nights, two 8-GPU pods each
    assert np.all(np.abs(reactive - 301) <= 1)  # 1 s batch + 5 min lead time
    # Planning exactly the lead time (5.5 min falls on the 01:55 step) leaves the HPA's ramp
    # (0 -> 4 -> 8 -> 16 placeholders, one sync each) and the batch: the second pod waits 31 s.
    scheduled = result.runs["scheduled"].outcome.window_pod_waits
    assert sorted(scheduled.tolist()) == [1, 1, 1, 31, 31, 31]
    # A margin that covers a refresh step, the ramp and the batch: nodes are Ready before 02:00.
    early = _run(base, "scheduled", _config(warmup_s=2 * HOUR, margin_s=90.0), schedules=schedule)
    assert np.all(early.runs["scheduled"].outcome.window_pod_waits == 0)


def _thread_pools() -> list[int]:
    from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

    return [int(pool["num_threads"]) for pool in threadpool_info()]


def test_simulation_workers_run_native_libraries_on_one_thread() -> None:
    # Two workers each starting a BLAS thread per core made their fits 1.6x slower than alone.
    jobs = _Jobs(2)
    try:
        jobs.submit(("probe", "threads"), _thread_pools)
        [(_, threads)] = jobs.next_completed()
    finally:
        jobs.close()
    assert threads and all(count == 1 for count in threads)


def test_the_simulators_cron_scaler_holds_the_windows_the_service_counts_as_due() -> None:
    """One definition of "due within the lead time" on both sides: at every step the simulator's
    ``scheduled_gpus`` equals the GPUs of the windows ``policy.windows_due`` returns at that moment,
    including a window starting exactly at a step and one exactly a lead time away."""
    from datetime import timedelta

    from adapters.types import ScheduledWindow
    from autoscaler.policy import windows_due
    from autoscaler.simulation.policies import scheduled_gpus

    origin = pd.Timestamp("2024-03-01T00:00:00Z")
    step_s, lead = 60.0, timedelta(minutes=5)
    rng = np.random.default_rng(3)
    starts = [origin + pd.Timedelta(seconds=int(s)) for s in rng.integers(0, 6 * 3600, 12)]
    starts += [origin + pd.Timedelta(minutes=90), origin + pd.Timedelta(minutes=95)]  # on a step; 5 min apart
    windows = tuple(
        ScheduledWindow("config", "ml", f"w{index}", start.to_pydatetime(), start.to_pydatetime() + lead, 8.0 + index)
        for index, start in enumerate(starts)
    )
    workload = make_workload("test", origin, step_s, np.zeros(6 * 60), Pods.empty(), windows)
    held = scheduled_gpus(workload, lead.total_seconds())

    def due_gpus(step: int, among: tuple[ScheduledWindow, ...]) -> float:
        now = (origin + pd.Timedelta(seconds=step * step_s)).to_pydatetime()
        return sum(window.gpus for window in windows_due(among, now, lead))

    assert held.tolist() == [due_gpus(step, windows) for step in range(workload.steps)]
    # The two on whole minutes: the window at minute 90 is due from minute 85 until 89, not at 90.
    edges = windows[-2:]
    assert [due_gpus(step, edges) for step in (84, 85, 89, 90, 94)] == [0.0, 20.0, 20.0, 21.0, 21.0]


@pytest.mark.parametrize("lead", ["fixed:5m", "uniform:min=2m,max=7m"])
@pytest.mark.parametrize("seed", range(6))
def test_fluid_demand_alone_steps_through_as_the_general_loop_does(
    lead: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fluid demand without pods in one pool under placeholders takes engine's fast loop: every figure
    the run gives (totals, ledger, capacity) is the general loop's, exactly."""
    from autoscaler.simulation import engine
    from autoscaler.simulation.actuation import Actuation
    from autoscaler.simulation.hpa import HPASpec, Tolerance
    from autoscaler.simulation.provisioner import PoolConfig

    rng = np.random.default_rng(seed)
    steps = 600
    jumps = rng.choice([0.0, 0.0, 0.0, 1.5, -1.5, 8.0, -8.0, 24.0, -24.0, 60.0], size=steps)
    base = np.clip(100 + np.cumsum(jumps), 0, 800)
    workload = make_workload("fluid", ORIGIN, 60.0, base, Pods.empty(), ())
    # A headroom that moves every step (a level) and a constant one (a buffer).
    served = np.clip(rng.normal(10, 8, size=steps), 0, None) if seed % 2 else np.full(steps, 4.0 * seed)
    pool = PoolConfig(8, parse_lead_time_distribution(lead), 600.0 if seed < 3 else 120.0)
    period = engine.Period(0.0, HOUR * (seed % 2), steps * 60.0)
    actuation = Actuation(hpa=HPASpec(tolerance=Tolerance(0.0, 0.05)))

    def figures(outcome: engine.Outcome) -> list[object]:
        ledger = outcome.ledger
        arrays = (ledger.starts, ledger.short_gpu_seconds, ledger.held_gpu_seconds, ledger.used_gpu_seconds)
        steps = (outcome.capacity_times, outcome.capacity_values)
        return [outcome.totals, *(array.tolist() for array in (*arrays, *steps))]

    fast = engine.run_policy(workload, served, period, pool, actuation)
    monkeypatch.setattr(engine, "_step_through_fluid", engine._step_through)
    general = engine.run_policy(workload, served, period, pool, actuation)
    assert fast.totals.launches > 0 and fast.totals.short > 0
    assert figures(fast) == figures(general)


@pytest.mark.timeout(30)  # the bug this guards against never ends
def test_a_node_empty_since_a_fractional_moment_goes_in_the_fluid_loop_too() -> None:
    """Demand drops at 582.4595107980946 s (a fractional step, as a drawn lead time brings one), where
    (t + 600) - 600 < t: the loop's next moment is t + 600, and a loop that asked t <= now - 600 there
    never removed the node and waited at that moment for ever."""
    step_s = 582.4595107980946
    assert (step_s + 600.0) - 600.0 < step_s
    demand = np.array([16.0, 8.0, 8.0, 8.0, 8.0])
    workload = make_workload("drop", pd.Timestamp("2000-01-01T00:00:00Z"), step_s, demand, Pods.empty(), ())
    period = Period(0.0, 0.0, len(demand) * step_s)
    pool = PoolConfig(8, parse_lead_time_distribution("fixed:5m"), 600.0)
    outcome = run_policy(workload, np.zeros(len(demand)), period, pool, Actuation(hpa=HPASpec()))
    # Two nodes until 600 s after the drop, one from then on, in GPU-seconds.
    assert outcome.totals.provisioned == pytest.approx(16 * (step_s + 600.0) + 8 * (4 * step_s - 600.0))
