"""PrometheusSource against a Prometheus that misbehaves (tests/hostile_prometheus.py, its own process on
loopback): every answer over a bound or malformed is a clear error naming the query and the bound, read
only up to where it went wrong, and in the time allowed. The commands' side (``report``, ``serve``, their
peak memory) is in tests/autoscaler/test_prometheus_hostile_process.py.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest

from adapters.prometheus.client import (
    PrometheusAnswerTooLarge,
    PrometheusBadResponse,
    PrometheusClientSettings,
    PrometheusError,
    PrometheusSource,
    PrometheusTimeout,
    PrometheusUnavailable,
)
from adapters.prometheus.promql import SignalQuery
from tests import hostile_prometheus
from tests.prometheus_fixture import free_port

pytestmark = pytest.mark.timeout(120)

QUERY = SignalQuery("hostile", "sum by (nodepool) (gpus_requested_here)", timedelta(minutes=5))
END = pd.Timestamp("2026-11-22T08:00:00Z")
MIB = 1024 * 1024


def settings(url: str, **overrides: Any) -> PrometheusClientSettings:
    quick = PrometheusClientSettings(url=url, timeout_s=10.0, retries=0)
    return dataclasses.replace(quick, **overrides)


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[str]:
    with hostile_prometheus.running(request.param) as url:
        yield url


async def pull(url: str, **overrides: Any) -> PrometheusError:
    """The error of a two-hour backfill of ``QUERY`` (one request), after checking it names the query."""
    async with PrometheusSource(settings(url, **overrides)) as source:
        with pytest.raises(PrometheusError) as raised:
            await source.backfill(QUERY, END - timedelta(hours=2), END)
    assert f"query {QUERY.promql!r}: " in str(raised.value)
    assert "\n" not in str(raised.value)
    return raised.value


@pytest.mark.parametrize(
    ("hostile", "raised", "message"),
    [
        ("many_series", PrometheusAnswerTooLarge, "more than 10,000 series (prometheus.max_series)"),
        ("huge_body", PrometheusAnswerTooLarge, "the answer is over 64 MiB (prometheus.max_answer_bytes)"),
        # Decompressed bytes count: under a megabyte on the wire is still over the bound.
        ("gzip_bomb", PrometheusAnswerTooLarge, "the answer is over 64 MiB (prometheus.max_answer_bytes)"),
        ("body_50mb", PrometheusBadResponse, "series {} has more than the 25 samples asked for"),
        ("deep", PrometheusBadResponse, "JSON nested deeper than 32 levels"),
        ("huge_number", PrometheusBadResponse, "not valid JSON (parse error: integer overflow)"),
        ("timeout", PrometheusTimeout, "Prometheus-side timeout, HTTP 503 from "),
    ],
    indirect=["hostile"],
)
async def test_an_answer_over_a_bound_or_malformed_is_a_clear_error(
    hostile: str, raised: type[PrometheusError], message: str
) -> None:
    error = await pull(hostile)
    assert type(error) is raised
    assert message in str(error)


@pytest.mark.parametrize("hostile", ["huge_body"], indirect=True)
async def test_the_byte_bound_is_a_setting_and_the_body_is_cut_there(hostile: str) -> None:
    started = time.monotonic()
    error = await pull(hostile, max_answer_bytes=MIB)
    took = time.monotonic() - started
    assert isinstance(error, PrometheusAnswerTooLarge)
    assert "over 1 MiB (prometheus.max_answer_bytes)" in str(error)
    # 1 MiB of a 200 MB body: stopped there, not read to the end (which takes seconds on loopback).
    assert took < 2.0


@pytest.mark.parametrize("hostile", ["many_series"], indirect=True)
async def test_the_series_bound_is_a_setting(hostile: str) -> None:
    error = await pull(hostile, max_series=100)
    assert isinstance(error, PrometheusAnswerTooLarge)
    assert "more than 100 series (prometheus.max_series)" in str(error)


@pytest.mark.parametrize(
    ("hostile", "message"),
    [
        ("drip", "no complete answer within the query timeout of 1.5 s (Prometheus answered, but too slowly)"),
        ("silent", "did not answer within the query timeout of 1.5 s"),
    ],
    indirect=["hostile"],
)
async def test_a_dripping_or_silent_answer_ends_at_the_query_timeout(hostile: str, message: str) -> None:
    started = time.monotonic()
    error = await pull(hostile, timeout_s=1.5, retries=2, backoff_initial_s=0.01, backoff_max_s=0.01)
    took = time.monotonic() - started
    assert isinstance(error, PrometheusTimeout)
    assert message in str(error)
    assert "cannot reach" not in str(error)
    assert error.attempts == 1  # the same query would take as long again
    assert 1.5 <= took < 2.5  # the timeout bounds the whole answer, not each byte


async def test_an_unreachable_prometheus_is_told_apart_from_a_timeout() -> None:
    error = await pull(f"http://127.0.0.1:{free_port()}")
    assert isinstance(error, PrometheusUnavailable)
    assert not isinstance(error, PrometheusTimeout)
    assert f"query {QUERY.promql!r}: cannot reach Prometheus: " in str(error)
