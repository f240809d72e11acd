"""An inference Deployment that scales to zero, and the requests that arrive while no replica is ready.

The Deployment is scaled by an HPA with ``minReplicas: 0`` (HPAScaleToZero, on by default in 1.37)
on ``AverageValue`` External metrics, one replica per ``replica_rate`` requests/s, every 15 s, with
the controller's arithmetic (:mod:`autoscaler.simulation.hpa`: from zero, any positive value wakes
ceil(value / target) replicas; back to zero after the 300 s scale-down window). A replica created at
a sync is Ready ``cold_start_s`` later (pod start plus model load), from the next 15 s slot on; a
scale-down removes the newest pods first, as a ReplicaSet deletes unready and younger pods first.

What wakes it:

- ``reactive``: the observed request rate, the last complete minute's requests / 60 (read at once:
  no scrape or adapter delay, which favours it);
- ``forecast``: ``request_rate_forecast`` as the service serves it: a full model selection every
  ``reselect_every_s`` on the last ``lookback_s`` of 5-minute mean rates, a forecast from the newest
  complete bin with the fitted models, and ``policy.decide`` with a ``rate`` rule (the peak of the
  p-quantile over a lead time of the cold start plus the service's margin), served each minute;
- ``forecast+observed``: both metrics on one HPA (it takes the larger proposal).

``activation`` (requests/s) stands for a KEDA ScaledObject's ``activationValue``: the forecast counts
only while above it, so the Deployment wakes when it exceeds it and sleeps once it has been at or
below it for the 300 s window (KEDA's ``cooldownPeriod``); 0 is the HPA's rule, any positive
forecast wakes. The observed rate is never gated.

Requests are known per minute and taken as spread evenly over it, so a minute with no Ready replica
for 15 of its 60 s counts a quarter of its requests.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import pandas as pd

from autoscaler import policy
from autoscaler.simulation.hpa import SYNC_PERIOD_S, HPASpec, milli_value, placeholder_replicas
from forecast.base import model_history
from forecast.engine import Selection, fit_select_many

MINUTE_S = 60.0
SLOTS_PER_MINUTE = round(MINUTE_S / SYNC_PERIOD_S)
WAKERS = ("reactive", "forecast", "forecast+observed")
LEAD_TIME_SOURCE = "simulated (--cold-start plus the service's margin)"


@dataclass(frozen=True)
class ColdStartConfig:
    """The Deployment, its HPA and the forecast that may wake it."""

    cold_start_s: float = 180.0  # pod start plus model load
    replica_rate: float = 20.0  # requests/s one replica serves: the HPA's AverageValue
    quantile: float = 0.9
    lead_margin_s: float = 90.0  # the service's lead_time_margin
    forecast_step_s: float = 300.0
    reselect_every_s: float = 6 * 3600.0
    lookback_s: float = 14 * 86400.0
    warmup_s: float = 7 * 86400.0
    hpa: HPASpec = field(default_factory=lambda: HPASpec(min_replicas=0))
    activation: float = 0.0  # requests/s the forecast must exceed to count (KEDA's activationValue)
    seed: int = 0

    @property
    def lead_s(self) -> float:
        return self.cold_start_s + self.lead_margin_s


@dataclass(frozen=True)
class WakeOutcome:
    """One waker's figures over the scored minutes."""

    requests: float
    requests_while_none_ready: float
    wakes: int  # scale-ups from zero replicas
    replica_hours: float  # replicas in existence (starting or Ready)
    hours_none_ready: float

    @property
    def fraction_while_none_ready(self) -> float:
        return self.requests_while_none_ready / self.requests if self.requests else 0.0


def observed_rate(per_minute: np.ndarray) -> np.ndarray:
    """Per sync slot, the request rate of the last complete minute (0 during the first)."""
    rate = np.r_[0.0, per_minute[:-1]] / MINUTE_S
    return np.repeat(rate, SLOTS_PER_MINUTE)


def ready_replicas(replicas: np.ndarray, cold_start_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Per sync slot, the replicas that exist and those that are Ready, from the count after each sync.

    A pod created at slot k is Ready from slot k + ceil(cold_start / 15 s); scale-downs remove the
    newest pods first.
    """
    delay = math.ceil(round(cold_start_s / SYNC_PERIOD_S, 6))
    ready_from: list[int] = []  # each pod's first Ready slot, oldest pod first (non-decreasing)
    existing = np.empty(len(replicas), dtype=np.int64)
    ready = np.empty(len(replicas), dtype=np.int64)
    for slot, count in enumerate(replicas.tolist()):
        if count > len(ready_from):
            ready_from.extend([slot + delay] * (count - len(ready_from)))
        elif count < len(ready_from):
            del ready_from[count:]
        existing[slot] = len(ready_from)
        ready[slot] = bisect.bisect_right(ready_from, slot)
    return existing, ready


def outcome(per_minute: np.ndarray, replicas: np.ndarray, cold_start_s: float, first_minute: int) -> WakeOutcome:
    """The figures of one replica series (one count per sync slot) from ``first_minute`` on."""
    existing, ready = ready_replicas(replicas, cold_start_s)
    none_ready = (ready == 0).reshape(-1, SLOTS_PER_MINUTE).mean(axis=1)
    scored = slice(first_minute, None)
    start_slot = first_minute * SLOTS_PER_MINUTE
    before = np.r_[replicas[start_slot - 1] if start_slot else 0, replicas[start_slot:-1]]
    wakes = int(np.count_nonzero((before == 0) & (replicas[start_slot:] > 0)))
    hours = SYNC_PERIOD_S / 3600
    return WakeOutcome(
        requests=float(per_minute[scored].sum()),
        requests_while_none_ready=float((per_minute[scored] * none_ready[scored]).sum()),
        wakes=wakes,
        replica_hours=float(existing[start_slot:].sum() * hours),
        hours_none_ready=float(np.count_nonzero(ready[start_slot:] == 0) * hours),
    )


def rate_bins(per_minute: pd.Series, step_s: float) -> pd.Series:
    """Mean requests/s per forecast step, labelled by the step's start (``rate(...[5m])`` sampled
    at the step's end)."""
    bins: pd.Series = (per_minute / MINUTE_S).resample(pd.Timedelta(seconds=step_s), origin="start").mean()
    return bins


def served_forecast(per_minute: pd.Series, config: ColdStartConfig) -> np.ndarray:
    """``request_rate_forecast`` per minute from the first scored minute on (NaN before it)."""
    bins = rate_bins(per_minute, config.forecast_step_s)
    step = pd.Timedelta(seconds=config.forecast_step_s)
    lead_steps = max(1, int(config.lead_s // config.forecast_step_s))
    rule = policy.Rule(kind="rate", quantile=config.quantile)
    lead = policy.LeadTime(timedelta(seconds=config.lead_s), LEAD_TIME_SOURCE)
    times = per_minute.index
    served = np.full(len(times), math.nan)
    first = int(times.searchsorted(times[0] + pd.Timedelta(seconds=config.warmup_s)))
    selection: Selection | None = None
    selected_at: pd.Timestamp | None = None
    forecast_for = -1
    forecast = None
    for position in range(first, len(times)):
        now = times[position]
        complete = int(bins.index.searchsorted(now - step, side="right"))
        if selection is None or selected_at is None or (now - selected_at).total_seconds() >= config.reselect_every_s:
            history = _lookback(bins.iloc[:complete], config)
            results = fit_select_many(
                history, horizon_steps=lead_steps + 1, quantiles=(), policy_quantiles=(config.quantile,),
                lead_steps=lead_steps, seed=config.seed, time_budget_s=math.inf,
            )  # fmt: skip
            chosen = results[config.quantile].selection
            if chosen is None:
                raise RuntimeError("the engine selected no model")
            selection, selected_at, forecast_for = chosen, now, -1
        if complete != forecast_for:
            history = _lookback(bins.iloc[:complete], config)
            forecast = selection.forecast_history(model_history(history), lead_steps + 1, (config.quantile,))
            forecast_for = complete
        assert forecast is not None  # noqa: S101 - set at the first minute
        decision = policy.decide(rule, policy.Situation(forecast=forecast, now=now.to_pydatetime(), lead_time=lead))
        served[position] = decision.value if decision is not None else math.nan
    return served


def _lookback(history: pd.Series, config: ColdStartConfig) -> pd.Series:
    if not len(history):
        return history
    start = history.index[-1] - pd.Timedelta(seconds=config.lookback_s)
    return history.iloc[int(history.index.searchsorted(start, side="right")) :]


def _per_slot(values: np.ndarray) -> np.ndarray:
    """A per-minute metric as the HPA reads it at each sync: milli-units, -1 where unreadable."""
    milli = np.asarray([-1 if math.isnan(v) else milli_value(max(v, 0.0)) for v in values.tolist()], dtype=np.int64)
    return np.repeat(milli, SLOTS_PER_MINUTE)


def simulate_wakers(
    per_minute: pd.Series, config: ColdStartConfig, forecast: np.ndarray | None = None
) -> dict[str, WakeOutcome]:
    """Each waker's outcome on a per-minute request series (regular 1-minute UTC index)."""
    counts = per_minute.to_numpy(dtype=np.float64)
    first_minute = int(per_minute.index.searchsorted(per_minute.index[0] + pd.Timedelta(seconds=config.warmup_s)))
    if first_minute >= len(counts):
        raise ValueError("the warm-up covers the whole request series: nothing is left to score")
    served = served_forecast(per_minute, config) if forecast is None else forecast
    served = np.where(served > config.activation, served, np.where(np.isnan(served), np.nan, 0.0))
    observed = np.asarray([milli_value(v) for v in observed_rate(counts).tolist()], dtype=np.int64)
    # Before the first scored minute the forecast is not served: the HPA reads the observed rate.
    predicted = _per_slot(served)
    predicted[: first_minute * SLOTS_PER_MINUTE] = observed[: first_minute * SLOTS_PER_MINUTE]
    usage = {
        "reactive": observed,
        "forecast": predicted,
        "forecast+observed": np.vstack([predicted, observed]),
    }
    syncs = np.arange(len(counts) * SLOTS_PER_MINUTE) * SYNC_PERIOD_S
    target = milli_value(config.replica_rate)
    return {
        name: outcome(
            counts,
            placeholder_replicas(syncs, metric, config.hpa, target_milli=target),
            config.cold_start_s,
            first_minute,
        )
        for name, metric in usage.items()
    }
