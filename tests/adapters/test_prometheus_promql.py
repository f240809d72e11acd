"""Pure parts of the Prometheus adapter: grid, chunking, result conversion, merging, presets, settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from adapters.prometheus import presets
from adapters.prometheus.client import PrometheusClientSettings
from adapters.prometheus.promql import (
    RawSeries,
    SignalQuery,
    grid_end,
    grid_start,
    merge_signal,
    merge_signals,
    plan_chunks,
    step_grid,
    to_signals,
)
from adapters.types import Signal

MINUTE = timedelta(minutes=1)
T0 = pd.Timestamp("2026-11-22T08:00:00Z")


def raw(labels: dict[str, str], minutes: list[float], values: list[float]) -> RawSeries:
    seconds = np.array([T0.timestamp() + 60 * m for m in minutes], dtype=np.float64)
    return RawSeries(labels=labels, timestamps=seconds, values=np.array(values, dtype=np.float64))


def signal(values: list[float], start: pd.Timestamp = T0, labels: dict[str, str] | None = None) -> Signal:
    index = step_grid(start, start + (len(values) - 1) * MINUTE, MINUTE)
    series = pd.Series(values, index=index, dtype=np.float64)
    return Signal("demand", labels or {"pool": "a"}, series, pd.Timedelta(MINUTE))


def test_grid_is_anchored_on_the_epoch() -> None:
    moment = datetime(2026, 11, 22, 8, 0, 30, tzinfo=UTC)
    assert grid_start(moment, MINUTE) == pd.Timestamp("2026-11-22T08:01:00Z")
    assert grid_end(moment, MINUTE) == pd.Timestamp("2026-11-22T08:00:00Z")
    assert grid_start(T0, timedelta(minutes=5)) == grid_end(T0, timedelta(minutes=5)) == T0
    with pytest.raises(ValueError, match="naive"):
        grid_start(datetime(2026, 11, 22), MINUTE)


@pytest.mark.parametrize(("points", "max_points"), [(1, 10), (10, 10), (11, 10), (20_160, 10_000), (100, 7)])
def test_chunks_cover_the_grid_once_and_stay_under_the_limit(points: int, max_points: int) -> None:
    end = T0 + (points - 1) * MINUTE
    chunks = plan_chunks(T0, end, MINUTE, max_points)
    covered = [point for a, b in chunks for point in step_grid(a, b, MINUTE)]
    assert covered == list(step_grid(T0, end, MINUTE))
    assert all(len(step_grid(a, b, MINUTE)) <= max_points for a, b in chunks)
    assert len(chunks) == -(-points // max_points)


def test_series_are_split_by_labels_without_the_metric_name() -> None:
    query = SignalQuery("gpus", "x", MINUTE)
    parts = [
        raw({"__name__": "x", "pool": "b"}, [0, 1], [1, 2]),
        raw({"__name__": "x", "pool": "a"}, [0, 1, 2], [3, 4, 5]),
    ]
    signals = to_signals(query, parts, T0, T0 + 2 * MINUTE)
    assert [s.labels for s in signals] == [{"pool": "a"}, {"pool": "b"}]
    assert signals[0].series.tolist() == [3, 4, 5]
    assert signals[1].series.tolist()[:2] == [1, 2]
    assert np.isnan(signals[1].series.iloc[2])  # absent, so a gap and never zero
    assert all(s.name == "gpus" and s.step == pd.Timedelta(MINUTE) for s in signals)


def test_a_peak_query_asks_for_each_steps_maximum_and_labels_it_by_the_steps_start() -> None:
    query = SignalQuery("gpus", "sum(x)", 5 * MINUTE, per_step="peak")
    assert query.range_promql == "max_over_time((sum(x))[299999ms:30s] offset 30s)"
    # The resolution divides the step, so that the subquery's first point is the step's start.
    for seconds, resolution in ((45, "15s"), (20, "10s"), (7, "1s"), (3600, "30s")):
        peak = SignalQuery("gpus", "sum(x)", timedelta(seconds=seconds), per_step="peak")
        assert peak.range_promql == f"max_over_time((sum(x))[{seconds * 1000 - 1}ms:{resolution}] offset {resolution})"
    assert SignalQuery("gpus", "sum(x)", 5 * MINUTE).range_promql == "sum(x)"
    # Evaluated at 08:05 and 08:10, the points are the steps starting at 08:00 and 08:05.
    (peaks,) = to_signals(query, [raw({"pool": "a"}, [5, 10], [7, 9])], T0 + 5 * MINUTE, T0 + 10 * MINUTE)
    assert list(peaks.series.index) == [T0, T0 + 5 * MINUTE]
    assert peaks.series.tolist() == [7, 9]
    with pytest.raises(ValueError, match="per_step must be 'last' or 'peak'"):
        SignalQuery("gpus", "x", MINUTE, per_step="max")  # type: ignore[arg-type]


def test_chunks_with_repeated_timestamps_merge_and_non_finite_values_become_gaps() -> None:
    query = SignalQuery("gpus", "x", MINUTE)
    parts = [
        raw({"pool": "a"}, [0, 1, 2], [1, np.inf, 3]),
        raw({"pool": "a"}, [2, 3, 4.5], [3, -np.inf, 9]),  # 4.5 is off the grid
        raw({"pool": "a"}, [5, 40], [np.nan, 7]),  # 40 is outside the range
    ]
    (only,) = to_signals(query, parts, T0, T0 + 5 * MINUTE)
    np.testing.assert_array_equal(only.series.to_numpy(), [1, np.nan, 3, np.nan, np.nan, np.nan])
    assert only.series.dtype == np.float64
    assert only.series.index.tz is not None
    assert only.series.index.freq == pd.Timedelta(MINUTE)


def test_split_by_sums_the_series_it_merges_and_keeps_all_missing_points_as_gaps() -> None:
    query = SignalQuery("gpus", "x", MINUTE, split_by=("pool",))
    parts = [
        raw({"pool": "a", "node": "n1"}, [0, 1], [1, 2]),
        raw({"pool": "a", "node": "n2"}, [1], [10]),
        raw({"node": "n3"}, [0], [5]),  # no pool label: the same as pool=""
    ]
    signals = to_signals(query, parts, T0, T0 + 2 * MINUTE)
    assert [s.labels for s in signals] == [{"pool": ""}, {"pool": "a"}]
    np.testing.assert_array_equal(signals[1].series.to_numpy(), [1, 12, np.nan])


def test_no_series_means_no_signals() -> None:
    assert to_signals(SignalQuery("gpus", "x", MINUTE), [], T0, T0 + MINUTE) == []


def test_merge_prefers_new_values_keeps_old_ones_where_the_update_has_gaps_and_trims() -> None:
    previous = signal([1, 2, 3, 4])
    update = signal([30, np.nan, 50, 60], start=T0 + 2 * MINUTE)
    merged = merge_signal(previous, update, max_history=timedelta(minutes=5))
    assert merged.series.index[0] == T0 + MINUTE
    np.testing.assert_array_equal(merged.series.to_numpy(), [2, 30, 4, 50, 60])
    assert merged.series.index.freq == pd.Timedelta(MINUTE)


def test_merge_leaves_a_gap_between_distant_pulls() -> None:
    merged = merge_signal(signal([1, 2]), signal([5], start=T0 + 4 * MINUTE), max_history=timedelta(hours=1))
    np.testing.assert_array_equal(merged.series.to_numpy(), [1, 2, np.nan, np.nan, 5])


def test_merge_without_history_trims_the_update() -> None:
    merged = merge_signal(None, signal([1, 2, 3]), max_history=timedelta(minutes=2))
    assert merged.series.tolist() == [2, 3]


def test_merge_refuses_other_series_and_other_grids() -> None:
    with pytest.raises(ValueError, match="cannot merge"):
        merge_signal(signal([1]), signal([1], labels={"pool": "b"}), timedelta(hours=1))
    with pytest.raises(ValueError, match="different step grids"):
        merge_signal(signal([1]), signal([1], start=T0 + timedelta(seconds=30)), timedelta(hours=1))
    with pytest.raises(ValueError, match="at least one step"):
        merge_signal(None, signal([1]), timedelta(seconds=1))


def test_merge_signals_stretches_silent_series_and_drops_them_once_empty() -> None:
    silent, busy = signal([1, 2], labels={"pool": "old"}), signal([1, 2])
    after = merge_signals([silent, busy], [signal([3, 4], start=T0 + 2 * MINUTE)], timedelta(minutes=4))
    assert [s.labels for s in after] == [{"pool": "a"}, {"pool": "old"}]
    np.testing.assert_array_equal(after[1].series.to_numpy(), [1, 2, np.nan, np.nan])
    later = merge_signals(after, [signal([5, 6, 7, 8], start=T0 + 4 * MINUTE)], timedelta(minutes=4))
    assert [s.labels for s in later] == [{"pool": "a"}]


@pytest.mark.parametrize(
    ("step", "split_by"), [(timedelta(seconds=0.5), ()), (timedelta(seconds=90.5), ()), (MINUTE, ("bad-label",))]
)
def test_signal_queries_refuse_what_cannot_work(step: timedelta, split_by: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match=r"step|label"):
        SignalQuery("q", "up", step, split_by)


def test_settings_validate_and_give_capped_doubling_backoff() -> None:
    configured = PrometheusClientSettings(url="http://p:9090", retries=5, backoff_initial_s=0.5, backoff_max_s=3)
    assert configured.backoff_delays() == [0.5, 1.0, 2.0, 3.0, 3.0]
    for bad in (
        {"url": "p:9090"},
        {"url": "http://p", "timeout_s": 0},
        {"url": "http://p", "retries": -1},
        {"url": "http://p", "backoff_initial_s": 2, "backoff_max_s": 1},
        {"url": "http://p", "max_workers": 0},
        {"url": "http://p", "bearer_token": "t", "basic_auth": ("u", "p")},
        {"url": "http://p", "ca_file": "/ca.pem", "insecure_skip_verify": True},
    ):
        with pytest.raises(ValueError):  # noqa: PT011 (each case has its own message)
            PrometheusClientSettings(**bad)


def test_presets_split_by_what_they_aggregate_by() -> None:
    assert presets.gpus_requested().split_by == ("nodepool",)
    assert presets.gpus_requested().promql.startswith("sum by (nodepool) (")
    assert presets.gpus_allocatable(by=()).promql.startswith("sum by () (")
    assert presets.gpu_utilization(by=("node", "gpu")).split_by == ("node", "gpu")
    assert 'Hostname!=""' in presets.gpu_engine_active().promql
    assert 'hostname!=""' in presets.gpu_engine_active().promql


def test_preset_parameters_cannot_inject_promql() -> None:
    query = presets.request_rate("http_requests_total", matchers={"route": '"}) or vector(1) #'})
    assert '{route="\\"}) or vector(1) #"}' in query.promql
    for bad in (
        lambda: presets.request_rate("up or vector(1)"),
        lambda: presets.request_rate("up", window="5m] or vector(1"),
        lambda: presets.request_rate("up", by=("a) or (b",)),
        lambda: presets.gpus_requested(by=("gpu",)),
        lambda: presets.gpus_allocatable(nodepool_label="x) or vector(1", by=("nodepool",)),
    ):
        with pytest.raises(ValueError):  # noqa: PT011
            bad()


def test_gpu_resources_count_as_their_share_of_a_physical_gpu() -> None:
    from fractions import Fraction

    from adapters.gpu_units import GpuUnits, mig_share

    assert mig_share("nvidia.com/gpu") is None
    assert mig_share("nvidia.com/mig-1g.10gb") == Fraction(1, 7)  # A100 80GB, H100
    assert mig_share("nvidia.com/mig-3g.40gb") == Fraction(3, 7)
    assert mig_share("nvidia.com/mig-1g.10gb+me") == Fraction(1, 7)
    assert mig_share("nvidia.com/mig-7g.80gb") == 1
    assert mig_share("nvidia.com/mig-2g.12gb") == Fraction(2, 4)  # the A30 has 4 compute slices
    units = GpuUnits.of(time_slicing={"nvidia.com/gpu.shared": 4})
    assert units.share("nvidia.com/gpu.shared") == Fraction(1, 4)
    assert units.share("nvidia.com/gpu") == 1
    assert units.share("amd.com/gpu") is None  # not named: not a GPU here
    assert GpuUnits.of(["nvidia.com/gpu", "amd.com/gpu"]).share("amd.com/gpu") == 1
    assert GpuUnits.of(mig=False).share("nvidia.com/mig-1g.10gb") is None
    with pytest.raises(ValueError, match="not a MIG profile"):
        mig_share("nvidia.com/mig-big")


def test_gpu_presets_take_their_resource_units_namespaces_aggregation_and_liveness() -> None:
    query = presets.gpus_requested(
        resource="nvidia.com/gpu",
        time_slicing={"nvidia.com/gpu.shared": 4},
        exclude_namespaces=("gpu-placeholders", "batch"),
        aggregation="max",
    )
    assert query.promql.startswith("max by (nodepool) (")
    selected = 'resource=~"nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.*"'
    assert f'{selected}, namespace!~"gpu-placeholders|batch"}}' in query.promql
    assert '"gpu_share", "1/4", "resource", "nvidia_com_gpu_shared"' in query.promql
    assert query.zero_when_absent and query.liveness == presets.KSM_LIVENESS
    assert 'resource=~"nvidia_com_gpu"}' in presets.gpus_allocatable(mig=False).promql
    without = presets.gpus_requested(liveness=None, by=("namespace",))
    assert without.liveness_query() is None and without.pools_query() is None  # pools: split by nodepool only
    for bad in (
        lambda: presets.gpus_requested(exclude_namespaces=('x"} or vector(1) #',)),
        lambda: presets.gpus_requested(time_slicing={"nvidia.com/mig-1g.10gb": 2}),
        lambda: presets.gpus_requested(time_slicing={"nvidia.com/gpu.shared": 0}),
        lambda: presets.gpus_allocatable(aggregation="median"),  # type: ignore[arg-type]  # refused at run time
    ):
        with pytest.raises(ValueError):  # noqa: PT011 (each case has its own message)
            bad()


def test_each_preset_names_how_its_exporter_shows_it_is_alive() -> None:
    requested = presets.gpus_requested(step=timedelta(minutes=5))
    alive = requested.liveness_query()
    assert alive is not None and alive.per_step == "peak" and alive.step == requested.step
    assert alive.promql == 'count(kube_node_info or up{job="kube-state-metrics"} == 1)'
    pools = requested.pools_query()
    assert pools is not None and pools.split_by == ("nodepool",)
    assert 'kube_node_labels{label_karpenter_sh_nodepool!=""}' in pools.promql
    assert presets.gpu_utilization().liveness == "DCGM_FI_DEV_GPU_UTIL"
    assert not presets.gpu_utilization().zero_when_absent  # no GPU reporting is no utilisation, not 0 %
    rate = presets.request_rate("http_requests_total", matchers={"namespace": "inference"})
    assert rate.liveness == 'http_requests_total{namespace="inference"}'
