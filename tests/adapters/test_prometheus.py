"""PrometheusSource against a real Prometheus backfilled with real trace values (tests/prometheus_fixture.py)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from adapters.prometheus import presets
from adapters.prometheus.answer import AnswerBudget
from adapters.prometheus.client import (
    PrometheusBadResponse,
    PrometheusClientSettings,
    PrometheusQueryError,
    PrometheusSource,
    PrometheusTimeout,
    PrometheusUnavailable,
)
from adapters.prometheus.promql import PerStep, SignalQuery, grid_start, merge_signal
from adapters.types import Signal
from tests import prometheus_fixture
from tests.prometheus_fixture import (
    EDGE_METRIC,
    FaultProxy,
    FixtureTrace,
    PrometheusServer,
    ProxyMode,
    free_port,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]

MINUTE = timedelta(minutes=1)
RUNNING_PODS = 'kube_pod_container_resource_requests{resource="nvidia_com_gpu", pod=~".+-running"}'


def settings(url: str, **overrides: Any) -> PrometheusClientSettings:
    """Short timeouts and a fast backoff (0.01 s doubling up to 0.04 s), so fault tests stay quick."""
    fast = PrometheusClientSettings(url=url, timeout_s=5.0, retries=2, backoff_initial_s=0.01, backoff_max_s=0.04)
    return dataclasses.replace(fast, **overrides)


def by_label(signals: Sequence[Signal], label: str) -> dict[str, pd.Series]:
    return {signal.labels[label]: signal.series for signal in signals}


def assert_matches(actual: pd.Series, expected: pd.Series) -> None:
    """Same values on the actual grid (the truth frames use a different datetime resolution)."""
    np.testing.assert_allclose(actual.to_numpy(), expected.reindex(actual.index).to_numpy(), equal_nan=True)


@pytest.fixture
def trace(prometheus: PrometheusServer) -> FixtureTrace:
    return prometheus.trace


async def test_backfill_returns_the_values_written(prometheus: PrometheusServer, trace: FixtureTrace) -> None:
    query = SignalQuery("running", RUNNING_PODS, MINUTE)
    async with PrometheusSource(settings(prometheus.url)) as source:
        signals = await source.backfill(query, trace.end - timedelta(days=1), trace.end)

    assert len(signals) == len(trace.nodepool_of_vc)
    for signal in signals:
        vc = signal.labels["namespace"]
        assert signal.labels == {
            "namespace": vc,
            "pod": f"{vc}-running",
            "container": "main",
            "node": trace.node(vc),
            "resource": "nvidia_com_gpu",
            "unit": "integer",
        }
        assert signal.name == "running"
        assert signal.step == pd.Timedelta(minutes=1)
        assert signal.series.dtype == np.float64
        assert str(signal.series.index.tz) == "UTC"
        assert len(signal.series) == 24 * 60 + 1
        assert signal.series.notna().all()
        assert_matches(signal.series, trace.running[vc])


async def test_a_peak_query_holds_each_steps_highest_value(prometheus: PrometheusServer, trace: FixtureTrace) -> None:
    # A day with movement (the fixture's last hour is flat), at the service's 5-minute step.
    start, end = trace.end - timedelta(days=2), trace.end - timedelta(days=1)
    step = timedelta(minutes=5)
    peak = SignalQuery("running", RUNNING_PODS, step, split_by=("namespace",), per_step="peak")
    last = dataclasses.replace(peak, per_step="last")
    async with PrometheusSource(settings(prometheus.url)) as source:
        peaks = by_label(await source.backfill(peak, start, end), "namespace")
        samples = by_label(await source.backfill(last, start, end), "namespace")

    first = grid_start(start, step)
    missed = 0
    for vc, series in peaks.items():
        # Labelled by the start of its step: evaluated at first, the first point is the step before it.
        assert series.index[0] == first - step
        assert series.index.to_series().diff().dropna().eq(pd.Timedelta(step)).all()
        # The step from t holds the samples written at t, t + 1 min, ..., t + 4 min.
        expected = trace.running[vc].resample(step, label="left", closed="left").max()
        assert_matches(series, expected)
        assert_matches(samples[vc], trace.running[vc])
        shared = series.index.intersection(samples[vc].index)
        missed += int((series[shared] > samples[vc][shared]).sum())
    assert missed > 0  # 10 steps of this day: sampling at the grid points alone misses what happened between them


@pytest.mark.parametrize(
    ("chunk", "requests"),
    [
        (timedelta(days=1), 14),  # the default: a day per request
        (timedelta(days=14), 3),  # 20,160 points: over Prometheus's 11,000 limit for one request
    ],
)
async def test_two_weeks_at_one_minute_come_back_whole_in_chunks(
    fault_proxy: FaultProxy, trace: FixtureTrace, chunk: timedelta, requests: int
) -> None:
    query = SignalQuery("running", RUNNING_PODS, MINUTE, split_by=("namespace",))
    async with PrometheusSource(settings(fault_proxy.url, chunk=chunk)) as source:
        signals = await source.backfill(query, trace.start, trace.end)

    assert fault_proxy.requests_seen == requests
    for vc, series in by_label(signals, "namespace").items():
        assert len(series) == len(trace.running) == 14 * 1440
        assert series.index[0] == trace.start
        assert series.index.to_series().diff().dropna().eq(pd.Timedelta(minutes=1)).all()
        assert_matches(series, trace.running[vc])


async def test_one_request_over_the_point_limit_is_a_query_error(
    prometheus: PrometheusServer, trace: FixtureTrace
) -> None:
    async with PrometheusSource(settings(prometheus.url)) as source:
        with pytest.raises(PrometheusQueryError) as raised:
            await source.query_range(RUNNING_PODS, trace.start, trace.end, MINUTE)
    assert raised.value.error_type == "bad_data"
    assert "11,000 points" in raised.value.message
    assert raised.value.attempts == 1  # a rejected query is not retried


async def test_a_fractional_timeout_is_accepted_by_prometheus(
    prometheus: PrometheusServer, trace: FixtureTrace
) -> None:
    async with PrometheusSource(settings(prometheus.url, timeout_s=2.5)) as source:
        assert await source.backfill(SignalQuery("running", RUNNING_PODS, MINUTE), trace.end - MINUTE, trace.end)


async def test_small_chunks_join_up_exactly(prometheus: PrometheusServer, trace: FixtureTrace) -> None:
    query = SignalQuery("running", RUNNING_PODS, MINUTE, split_by=("namespace",))
    start, end = trace.end - timedelta(minutes=100), trace.end
    async with PrometheusSource(settings(prometheus.url)) as whole:
        expected = await whole.backfill(query, start, end)
    async with PrometheusSource(settings(prometheus.url), max_points_per_request=7) as chunked:
        actual = await chunked.backfill(query, start, end)

    assert [s.labels for s in actual] == [s.labels for s in expected]
    for got, want in zip(actual, expected, strict=True):
        pd.testing.assert_series_equal(got.series, want.series)


@pytest.mark.parametrize("per_step", ["last", "peak"])
async def test_two_weeks_in_daily_requests_equal_one_request(
    fault_proxy: FaultProxy, trace: FixtureTrace, per_step: PerStep
) -> None:
    # The service's 5-minute step: 14 days are 4,033 points, under Prometheus's limit for one request.
    # Off the day boundaries on purpose, so that the first and last chunks are partial.
    query = SignalQuery("running", RUNNING_PODS, timedelta(minutes=5), ("namespace",), per_step)
    start, end = trace.start + timedelta(hours=3, minutes=7), trace.end - timedelta(minutes=13)
    async with PrometheusSource(settings(fault_proxy.url, chunk=timedelta(days=30))) as whole:
        expected = await whole.backfill(query, start, end)
    assert fault_proxy.requests_seen == 1
    async with PrometheusSource(settings(fault_proxy.url)) as daily:
        actual = await daily.backfill(query, start, end)
    assert fault_proxy.requests_seen == 1 + 14

    assert [signal.labels for signal in actual] == [signal.labels for signal in expected]
    for got, want in zip(actual, expected, strict=True):
        # Every grid point once: no duplicate and no gap at the day boundaries, the same values.
        assert got.series.index.is_unique
        assert got.series.index.to_series().diff().dropna().eq(pd.Timedelta(minutes=5)).all()
        pd.testing.assert_series_equal(got.series, want.series)


async def test_incremental_pulls_merge_into_the_backfill(prometheus: PrometheusServer, trace: FixtureTrace) -> None:
    query = SignalQuery("running", RUNNING_PODS, MINUTE, split_by=("namespace",))
    history = timedelta(hours=6)
    since = trace.end - timedelta(hours=1)
    async with PrometheusSource(settings(prometheus.url)) as source:
        old = await source.backfill(query, trace.end - history, since)
        new = await source.pull_incremental(query, since, trace.end)
        nothing_new = await source.pull_incremental(query, trace.end, trace.end)

    assert nothing_new == []
    assert all(signal.series.index[0] == since + MINUTE for signal in new)
    assert all(signal.series.index[-1] == trace.end for signal in new)
    merged = {
        before.labels["namespace"]: merge_signal(before, after, history) for before, after in zip(old, new, strict=True)
    }
    for vc, signal in merged.items():
        assert len(signal.series) == history // MINUTE
        assert signal.series.index[-1] == trace.end
        assert_matches(signal.series, trace.running[vc])


async def test_query_with_no_series_gives_an_empty_list(prometheus: PrometheusServer, trace: FixtureTrace) -> None:
    query = SignalQuery("nothing", 'kube_pod_container_resource_requests{namespace="does-not-exist"}', MINUTE)
    async with PrometheusSource(settings(prometheus.url)) as source:
        assert await source.backfill(query, trace.end - timedelta(hours=1), trace.end) == []


async def test_invalid_promql_is_a_query_error_with_prometheus_message(prometheus: PrometheusServer) -> None:
    now = pd.Timestamp.now(tz="UTC")
    async with PrometheusSource(settings(prometheus.url)) as source:
        with pytest.raises(PrometheusQueryError) as raised:
            await source.backfill(SignalQuery("broken", "sum(rate(", MINUTE), now - timedelta(hours=1), now)
    assert raised.value.error_type == "bad_data"
    assert "parse error" in raised.value.message


async def test_gaps_nan_and_inf_are_gaps(prometheus: PrometheusServer, trace: FixtureTrace) -> None:
    edge = trace.edge_values
    async with PrometheusSource(settings(prometheus.url)) as source:
        (signal,) = await source.backfill(SignalQuery("edge", EDGE_METRIC, MINUTE), edge.index[0], edge.index[-1])
        utilization = await source.backfill(
            presets.gpu_utilization(), trace.dcgm_gap[0] - timedelta(hours=1), trace.dcgm_gap[1]
        )

    series = signal.series
    assert len(series) == 180
    for position in (30, 31, 60, 61):  # NaN, NaN, +Inf, -Inf samples
        assert np.isnan(series.iloc[position])
    # Minutes 100-114 were never written; Prometheus's 5 minute lookback still repeats minute 99 five times.
    assert (series.iloc[100:105] == edge.iloc[99]).all()
    assert series.iloc[105:115].isna().all()
    finite = edge[np.isfinite(edge)]
    np.testing.assert_array_equal(series[finite.index].to_numpy(), finite.to_numpy())

    gap_series = by_label(utilization, "node")[trace.node(trace.dcgm_gap_vc)]
    gap_start, gap_end = trace.dcgm_gap
    assert gap_series[: gap_start - MINUTE].notna().all()
    assert gap_series[gap_start + 5 * MINUTE : gap_end].isna().all()


def expected_requested(trace: FixtureTrace) -> dict[str, pd.Series]:
    pools = pd.Series(trace.nodepool_of_vc)
    per_pool = trace.running.T.groupby(pools).sum().T
    # Pending pods have no node, hence no nodepool.
    return {str(pool): per_pool[pool] for pool in per_pool.columns} | {"": trace.pending.sum(axis=1)}


def expected_utilization_by_pool(trace: FixtureTrace) -> dict[str, pd.Series]:
    pools = pd.Series(trace.nodepool_of_vc)
    return {str(pool): trace.utilization[list(vcs.index)].mean(axis=1) for pool, vcs in pools.groupby(pools)}


async def test_presets_run_and_return_the_expected_series(prometheus: PrometheusServer, trace: FixtureTrace) -> None:
    start, end = trace.end - timedelta(hours=1), trace.end  # clear of the DCGM gap
    pools = pd.Series(trace.nodepool_of_vc)
    allocatable_by_pool = trace.allocatable.groupby(pools).sum()
    node_of = {trace.node(vc): vc for vc in trace.nodepool_of_vc}
    rate_query = presets.request_rate("http_requests_total", window="5m", by=("service",), matchers={"code": "200"})
    async with PrometheusSource(settings(prometheus.url)) as source:
        requested = await source.backfill(presets.gpus_requested(), start, end)
        requested_by_namespace = await source.backfill(presets.gpus_requested(by=("namespace",)), start, end)
        requested_total = await source.backfill(presets.gpus_requested(by=()), start, end)
        allocatable = await source.backfill(presets.gpus_allocatable(), start, end)
        allocatable_total = await source.backfill(presets.gpus_allocatable(by=()), start, end)
        util_by_node = await source.backfill(presets.gpu_utilization(), start, end)
        util_by_pool = await source.backfill(presets.gpu_utilization(by=("nodepool",)), start, end)
        engine_by_node = await source.backfill(presets.gpu_engine_active(aggregation="max"), start, end)
        rates = await source.backfill(rate_query, start, end)

    for pool, series in by_label(requested, "nodepool").items():
        assert_matches(series, expected_requested(trace)[pool])
    assert set(by_label(requested, "nodepool")) == {"a100", "h100", ""}
    for vc, series in by_label(requested_by_namespace, "namespace").items():
        assert_matches(series, trace.running[vc] + trace.pending[vc])  # never the Succeeded pod's GPUs
    (total,) = requested_total
    assert total.labels == {}
    assert_matches(total.series, trace.running.sum(axis=1) + trace.pending.sum(axis=1))

    allocatable_seen = {pool: series.unique().tolist() for pool, series in by_label(allocatable, "nodepool").items()}
    assert allocatable_seen == {pool: [float(gpus)] for pool, gpus in allocatable_by_pool.items()}
    assert allocatable_total[0].series.unique().tolist() == [float(trace.allocatable.sum())]

    # dcgm-exporter versions disagree on Hostname/hostname; the preset sees all four nodes either way.
    assert set(by_label(util_by_node, "node")) == set(node_of)
    for node, series in by_label(util_by_node, "node").items():
        assert_matches(series, trace.utilization[node_of[node]])
    assert set(by_label(util_by_pool, "nodepool")) == {"a100", "h100"}
    for pool, series in by_label(util_by_pool, "nodepool").items():
        assert_matches(series, expected_utilization_by_pool(trace)[pool])
    assert set(by_label(engine_by_node, "node")) == set(node_of)
    for node, series in by_label(engine_by_node, "node").items():
        assert_matches(series, trace.utilization[node_of[node]] / 100)

    assert set(by_label(rates, "service")) == set(trace.requests_total.columns)
    for service, series in by_label(rates, "service").items():
        # Samples every minute cover the 5 minute window exactly: no extrapolation.
        expected = trace.requests_total[service].diff(5) / 300
        assert_matches(series, expected)


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
async def test_every_shipped_preset_is_valid_promql(
    prometheus: PrometheusServer, trace: FixtureTrace, name: str
) -> None:
    factory = presets.PRESETS[name]
    queries = [factory("http_requests_total")] if name == "request_rate" else [factory(), factory(by=())]
    # With each exporter's sign of life and the pools kube_node_labels knows, which the fixture has too.
    queries += [check for query in queries for check in (query.liveness_query(), query.pools_query()) if check]
    async with PrometheusSource(settings(prometheus.url)) as source:
        for query in queries:
            signals = await source.backfill(query, trace.end - timedelta(minutes=30), trace.end)
            assert signals, query.promql
            assert all(signal.series.notna().all() for signal in signals)


# Faults, through the proxy in front of the shared instance.


async def test_http_500_is_unavailable_after_the_retries(fault_proxy: FaultProxy, trace: FixtureTrace) -> None:
    fault_proxy.set_mode(ProxyMode.HTTP_500)
    query = SignalQuery("running", RUNNING_PODS, MINUTE)
    async with PrometheusSource(settings(fault_proxy.url, retries=3)) as source:
        started = time.monotonic()
        with pytest.raises(PrometheusUnavailable) as raised:
            await source.backfill(query, trace.end - timedelta(hours=1), trace.end)
        elapsed = time.monotonic() - started
    assert fault_proxy.requests_seen == 4
    assert raised.value.attempts == 4
    assert "HTTP 500" in str(raised.value)
    assert elapsed >= 0.01 + 0.02 + 0.04  # the configured backoff: 0.01 doubling, capped at 0.04


async def test_a_transient_500_is_retried_away(fault_proxy: FaultProxy, trace: FixtureTrace) -> None:
    fault_proxy.set_mode(ProxyMode.HTTP_500, times=2)
    query = SignalQuery("running", RUNNING_PODS, MINUTE)
    async with PrometheusSource(settings(fault_proxy.url, retries=2)) as source:
        signals = await source.backfill(query, trace.end - timedelta(hours=1), trace.end)
    assert len(signals) == len(trace.nodepool_of_vc)
    assert fault_proxy.requests_seen == 3


@pytest.mark.parametrize("mode", [ProxyMode.INVALID_JSON, ProxyMode.TRUNCATED, ProxyMode.CONNECTION_DROP])
async def test_garbled_answers_are_bad_responses(fault_proxy: FaultProxy, trace: FixtureTrace, mode: ProxyMode) -> None:
    fault_proxy.set_mode(mode)
    query = SignalQuery("running", RUNNING_PODS, MINUTE)
    async with PrometheusSource(settings(fault_proxy.url, retries=1)) as source:
        with pytest.raises(PrometheusBadResponse):
            await source.backfill(query, trace.end - timedelta(hours=1), trace.end)
        assert fault_proxy.requests_seen == 2
        fault_proxy.set_mode(ProxyMode.PASS_THROUGH)
        assert await source.backfill(query, trace.end - timedelta(hours=1), trace.end)


async def test_a_slow_prometheus_times_out_named_as_a_timeout(fault_proxy: FaultProxy, trace: FixtureTrace) -> None:
    fault_proxy.set_mode(ProxyMode.DELAY, delay_s=2.0)
    query = SignalQuery("running", RUNNING_PODS, MINUTE)
    async with PrometheusSource(settings(fault_proxy.url, timeout_s=0.3, retries=2)) as source:
        started = time.monotonic()
        with pytest.raises(PrometheusTimeout, match=r"did not answer within the query timeout of 0\.3 s") as raised:
            await source.backfill(query, trace.end - timedelta(hours=1), trace.end)
        assert time.monotonic() - started < 1.5
    # Prometheus was up: not "cannot reach Prometheus: Read timed out" as before, and not tried again.
    assert "cannot reach" not in str(raised.value)
    assert raised.value.attempts == 1 and fault_proxy.requests_seen == 1


async def test_a_retried_answer_counts_its_bytes_once(fault_proxy: FaultProxy, trace: FixtureTrace) -> None:
    window = (trace.end - timedelta(hours=6), trace.end)
    async with PrometheusSource(settings(fault_proxy.url, retries=1)) as source:
        measured = AnswerBudget(max_bytes=2**30, max_series=10)
        whole = await source.query_range(RUNNING_PODS, *window, MINUTE, budget=measured)
        fault_proxy.set_mode(ProxyMode.TRUNCATED, times=1)  # half the answer, then all of it
        budget = AnswerBudget(max_bytes=measured.bytes_read * 5 // 4, max_series=10)
        again = await source.query_range(RUNNING_PODS, *window, MINUTE, budget=budget)
    assert fault_proxy.requests_seen == 3
    assert budget.bytes_read == measured.bytes_read  # not 1.5 times: the cut answer's half was given back
    assert [series.labels for series in again] == [series.labels for series in whole]


async def test_killed_prometheus_is_unavailable_then_recovers(prometheus_restartable: PrometheusServer) -> None:
    trace = prometheus_restartable.trace
    query = SignalQuery("running", RUNNING_PODS, MINUTE)
    window = (trace.end - timedelta(hours=1), trace.end)
    async with PrometheusSource(settings(prometheus_restartable.url)) as source:
        assert await source.backfill(query, *window)  # keeps a pooled connection to the old process
        prometheus_restartable.kill()
        with pytest.raises(PrometheusUnavailable) as raised:
            await source.backfill(query, *window)
        assert raised.value.attempts == 3
        prometheus_restartable.start()
        recovered = await source.backfill(query, *window)
    assert len(recovered) == len(trace.nodepool_of_vc)


async def test_no_transport_exception_escapes_on_a_refused_connection() -> None:
    source = PrometheusSource(settings(f"http://127.0.0.1:{free_port()}", retries=0))
    now = pd.Timestamp.now(tz="UTC")
    with pytest.raises(PrometheusUnavailable) as raised:
        await source.backfill(SignalQuery("x", "up", MINUTE), now - timedelta(minutes=5), now)
    assert not isinstance(raised.value, OSError)
    await source.aclose()
    await source.aclose()  # idempotent


def test_settings_are_printable_without_secrets() -> None:
    configured = settings("https://prometheus:9090", bearer_token="s3cret", headers={"X-Scope-OrgID": "team"})
    assert "s3cret" not in repr(configured)
    assert "team" not in repr(configured)
    assert dataclasses.replace(configured, bearer_token=None).bearer_token is None


@pytest.mark.parametrize(("ci", "outcome"), [("", pytest.skip.Exception), ("true", pytest.fail.Exception)])
def test_missing_binaries_skip_locally_and_fail_under_ci(
    monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setattr(prometheus_fixture.shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="not installed"):
        prometheus_fixture.binaries_or_skip()
