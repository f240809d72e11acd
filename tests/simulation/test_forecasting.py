"""The forecasting policies serve, at every step, what the service would compute at that moment."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from adapters.types import Signal
from autoscaler import policy
from autoscaler.refresh import fitting
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.serving.provider import MetricInfo, SnapshotProvider, empty_snapshot
from autoscaler.simulation.forecasting import (
    SIMULATED_LEAD_TIME_SOURCE,
    BlockJob,
    ForecastCadence,
    forecast_groups,
    plan_blocks,
    run_block,
    serve,
    serve_decision,
)
from autoscaler.simulation.inputs import Workload, demand_workload, parse_schedule
from autoscaler.simulation.policies import parse_policies
from autoscaler.targets.plans import MetricPlan, RefreshInputs, RefreshSettings
from forecast.engine import fit_select_predict
from forecast.known_demand import remove_known_jobs
from forecast.registry import make_model
from tests import data_helpers

STEP = pd.Timedelta(minutes=5)
# Short lookback and periods keep the fits quick; the cadence logic is the same as the default's.
CADENCE = ForecastCadence(lookback_s=4.5 * 86400, reselect_every_s=2 * 3600.0, refit_every_s=2 * 3600.0)
pytestmark = pytest.mark.traces  # the workload is the Helios Earth trace


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    series = data_helpers.helios_running_gpus().iloc[: 6 * 1440]
    path = data_helpers.write_csv(series, Path(tmp_path_factory.mktemp("helios")) / "helios.csv.gz")
    # A 16-GPU window every day at 02:00: the history must have its past runs taken out.
    return demand_workload(path, pd.Timedelta(minutes=1), (parse_schedule("0 2 * * *;16;2h"),), 8)


def _block(workload: Workload, policies: str, cadence: ForecastCadence = CADENCE) -> BlockJob:
    """The block from 01:00 on day 5: it fits before the 02:00 window and serves through its start."""
    (group,) = forecast_groups(parse_policies(policies))
    first_step = 5 * 1440 + 60
    return plan_blocks(group, workload, first_step, cadence)[0]


def _history(job: BlockJob, now: pd.Timestamp, *, cleaned: bool) -> pd.Series:
    """What the refresher forecasts from at ``now``: complete bins, past window runs taken out."""
    history = job.bins[job.bins.index <= now - STEP]
    past = [(window.start, window.end, window.gpus) for window in job.windows if window.start < now]
    return remove_known_jobs(history, past)[0] if cleaned and past else history


def test_auto_serves_the_selections_forecast_from_the_newest_history(workload: Workload) -> None:
    job = _block(workload, "auto:0.9,auto:0.99")
    assert [spec.text for spec in job.specs] == ["auto:0.9", "auto:0.99"]  # one shared job
    assert any(window.start.hour == 2 for window in job.windows)
    results = run_block(job)
    fitted_at = job.step_times[0]
    lead = timedelta(seconds=CADENCE.lead_s)
    for spec, result in zip(job.specs, results, strict=True):
        assert result.models == [result.models[0]] and len(result.fit_seconds) == 1  # one selection
        # A separate selection per quantile (the service fits one policy quantile per call).
        selection = fit_select_predict(
            _history(job, fitted_at, cleaned=True),
            horizon_steps=CADENCE.horizon_steps,
            quantiles=(spec.quantile,),
            policy_quantile=spec.quantile,
            lead_steps=CADENCE.lead_steps,
            time_budget_s=float("inf"),
        ).selection
        assert selection.model == result.models[0]
        # Steps at the fit, between fits, and after the 02:00 window started (it leaves the history).
        for position in (0, 7, 42, 63, 97, 119):
            now = job.step_times[position]
            history = _history(job, now, cleaned=True)
            forecast = selection.forecast(history, CADENCE.horizon_steps, (spec.quantile,))
            demand = policy.forecast_demand(
                forecast, quantile=spec.quantile, now=now, lead_time=lead, windows=job.windows
            )
            expected = policy.headroom(demand, float(job.bins[history.index[-1]])).value
            assert result.values[position] == expected, (spec.text, position)
    # The forecasts follow the data between fits (a stale forecast would serve a flat line).
    assert len(np.unique(results[0].values[60:])) > 3


def test_holt_winters_updates_its_fitted_model_every_step(workload: Workload) -> None:
    job = _block(workload, "holt_winters")
    (result,) = run_block(job)
    model = make_model("holt_winters", max_horizon=CADENCE.horizon_steps).fit(
        _history(job, job.step_times[0], cleaned=False)
    )
    for position in (0, 13, 64, 118):
        now = job.step_times[position]
        history = _history(job, now, cleaned=False)  # PHPA forecasts the raw metric
        forecast = model.forecast_from(history, CADENCE.horizon_steps, ())
        expected = serve(job, job.specs[0], forecast, now, float(job.bins[history.index[-1]]))
        assert result.values[position] == expected, position


def test_refits_between_selections_refit_the_selected_models(workload: Workload) -> None:
    cadence = ForecastCadence(lookback_s=4.5 * 86400, reselect_every_s=2 * 3600.0, refit_every_s=3600.0)
    results = run_block(_block(workload, "auto:0.9,auto:0.99", cadence))
    for result in results:
        assert len(result.fit_seconds) == 2
        assert result.models[1] == result.models[0]  # a refit keeps what selection chose
        assert not result.notes


async def test_service_and_simulator_serve_one_policy(workload: Workload, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same forecast, moment, lead time, windows and requested-now give the same value and
    explanation through the refresher (the service) and through the simulator's ``auto`` policy."""
    job = _block(workload, "auto:0.9")
    (spec,) = job.specs
    now = job.step_times[55]  # 01:55: the 02:00 window opens within the lead time
    assert now.hour == 1 and now.minute == 55
    raw = job.bins[job.bins.index <= now - STEP]  # complete bins: what Prometheus would answer
    history = _history(job, now, cleaned=True)
    lead_steps = job.cadence.lead_steps
    engine = fit_select_predict(
        history, horizon_steps=lead_steps + 1, quantiles=(0.9,), policy_quantile=0.9, lead_steps=lead_steps
    )
    lead_time = policy.LeadTime(timedelta(seconds=job.cadence.lead_s), SIMULATED_LEAD_TIME_SOURCE)

    simulated = serve_decision(job, spec, engine.forecast, now, float(raw.iloc[-1]))

    class TraceSource:
        name = "gpus"

        async def pull(self, moment: datetime) -> list[Signal]:
            return [Signal("gpus", {}, raw, STEP)]

    monkeypatch.setattr(fitting, "work_in_worker", lambda request: fitting.WorkerResult(engine))
    metrics = (MetricInfo("gpu_headroom", "headroom"),)
    with ThreadPoolExecutor(max_workers=1) as pool:
        refresher = Refresher(
            provider=SnapshotProvider(empty_snapshot(metrics)),
            inputs=RefreshInputs(
                metrics=metrics,
                plans=(MetricPlan("gpu_headroom", "gpus", "headroom", spec.quantile),),
                sources=(TraceSource(),),
                refresh=RefreshSettings(interval=timedelta(minutes=1), lead_time=lead_time.value),
                windows=lambda start, horizon: job.windows,
                lead_time=lambda labels: lead_time,
            ),
            pools=ForecastPools([pool]),
            clock=lambda: now.to_pydatetime(),
        )
        (served,) = (await refresher.refresh_once()).series["gpu_headroom"]

    assert served.value == simulated.value > 0
    assert served.explanation == simulated.explanation
    assert "plus scheduled windows" in served.explanation and SIMULATED_LEAD_TIME_SOURCE in served.explanation
    assert served.provenance is not None and served.provenance.peak_at == simulated.peak_at
    assert served.provenance.requested_now == float(raw.iloc[-1])
