"""Signal sources built from the settings: Prometheus queries with their history kept in memory."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

import pandas as pd

from adapters.prometheus import presets
from adapters.prometheus.client import (
    PrometheusAnswerTooLarge,
    PrometheusAuthError,
    PrometheusBadResponse,
    PrometheusClientSettings,
    PrometheusError,
    PrometheusQueryError,
    PrometheusSource,
    PrometheusTimeout,
)
from adapters.prometheus.promql import SignalQuery, grid_end, merge_signals
from adapters.types import AdapterError, Signal
from autoscaler.config.prometheus_settings import PrometheusSettings
from autoscaler.config.settings import SignalSettings
from autoscaler.refresh.known_series import Identity, alive_points, fill_absent, known_identities, newest_pools

log = logging.getLogger(__name__)

# Late scrapes and rule evaluations can fill in the newest points after we first read them; every
# pull re-reads this many steps, and merging lets the newer values win.
REREAD_STEPS = 3

# Names of node pools known from outside Prometheus (a Karpenter NodePool watch), read at every pull.
KnownPools = Callable[[], Iterable[str]]


def signal_query(spec: SignalSettings) -> SignalQuery:
    """The PromQL a configured signal stands for."""
    options = spec.preset_options()
    if spec.query is not None:
        return SignalQuery(name=spec.name, promql=spec.query, step=spec.step, split_by=spec.by or (), **options)
    if spec.preset == "request_rate":
        assert spec.metric is not None  # noqa: S101 - settings validation guarantees it
        return presets.request_rate(spec.metric, step=spec.step, name=spec.name, **options)
    factory = presets.PRESETS[str(spec.preset)]
    return factory(step=spec.step, name=spec.name, **options)


def client_settings(settings: PrometheusSettings) -> PrometheusClientSettings:
    basic_auth = None
    if settings.basic_auth_username is not None and settings.basic_auth_password_file is not None:
        password = settings.basic_auth_password_file.read_text(encoding="utf-8").strip()
        basic_auth = (settings.basic_auth_username, password)
    return PrometheusClientSettings(
        url=settings.url,
        timeout_s=settings.timeout.total_seconds(),
        retries=settings.retries,
        backoff_initial_s=settings.backoff_initial.total_seconds(),
        backoff_max_s=settings.backoff_max.total_seconds(),
        bearer_token_file=settings.bearer_token_file,
        basic_auth=basic_auth,
        ca_file=settings.ca_file,
        insecure_skip_verify=settings.insecure_skip_verify,
        headers=dict(settings.headers),
        max_workers=settings.max_workers,
        max_answer_bytes=settings.max_answer_bytes,
        max_series=settings.max_series,
        chunk=settings.chunk,
    )


class SourceDown(AdapterError):
    """The exporter behind a signal shows no sign of life at the newest point: nothing new to serve."""


class QueryFailed(AdapterError):
    """One of a signal's queries failed: names the query (``NAME``, ``NAME:alive``, ``NAME:pools``) and
    the kind of failure (``failure_kind``) before the client's own message."""

    def __init__(self, query: str, error: PrometheusError) -> None:
        super().__init__(f"query {query!r} failed ({failure_kind(error)}): {error}")
        self.query = query
        self.kind = failure_kind(error)


def failure_kind(error: PrometheusError) -> str:
    """timeout (ours, or Prometheus's 503 "query timed out"), unreachable, error answer (5xx, 429), bad
    answer (not an API result), too large (past a bound of hostile input), rejected (the query) or
    refused (401, 403)."""
    kinds: tuple[tuple[type[PrometheusError], str], ...] = (
        (PrometheusAuthError, "refused"),
        (PrometheusQueryError, "rejected"),
        (PrometheusTimeout, "timeout"),
        (PrometheusAnswerTooLarge, "too large"),
        (PrometheusBadResponse, "bad answer"),
    )
    for kind, name in kinds:
        if isinstance(error, kind):
            return name
    return "error answer" if "http " in str(error).lower() else "unreachable"


class PrometheusSignalSource:
    """One configured signal: the whole lookback on the first pull, then only what is new.

    The history lives here between pulls, so a refresh reads a few points per series rather than
    two weeks of them. A failed pull raises (the refresher keeps serving) and leaves the history as
    it was, so the next pull fills the gap. With a liveness query, a pull whose newest point finds
    the exporter dead raises ``SourceDown``, and a count of GPUs is 0 for each known series
    (``known_series``) wherever the exporter was alive. ``known_pools`` names pools known from
    elsewhere (the seam for a Karpenter NodePool watch).
    """

    def __init__(
        self,
        prometheus: PrometheusSource,
        query: SignalQuery,
        lookback: timedelta,
        known_pools: KnownPools | None = None,
    ) -> None:
        self.name = query.name
        self.prometheus = prometheus
        self.query = query
        self.lookback = lookback
        self.known_pools = known_pools
        self._liveness = query.liveness_query()
        self._pools = query.pools_query()
        self._queries = [q for q in (query, self._liveness, self._pools) if q is not None]
        self._histories: dict[str, list[Signal]] = {q.name: [] for q in self._queries}
        self._pulled_until: datetime | None = None
        self._served: set[Identity] = set()

    async def pull(self, now: datetime) -> list[Signal]:
        if self._pulled_until is None and self.query.recorded is not None:
            await self._choose_recorded(now)
        tasks = [asyncio.create_task(self._read(query, now)) for query in self._queries]
        try:
            updates = await asyncio.gather(*tasks)
        finally:
            for task in tasks:  # one failed: the others are of no use (and must not outlive the pull)
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        # Off the event loop: merging a pull into thousands of histories takes about 1 s per 1,000
        # series on a busy core, long enough to delay Lease renewals and API answers.
        return await asyncio.to_thread(self._merged, now, updates)

    def _merged(self, now: datetime, updates: list[list[Signal]]) -> list[Signal]:
        """The histories with this pull's points merged in; raises ``SourceDown`` as ``pull`` says."""
        for query, update in zip(self._queries, updates, strict=True):
            self._histories[query.name] = merge_signals(self._histories[query.name], update, self.lookback)
        if any(updates) or self._pulled_until is not None:
            self._pulled_until = now
        history = self._histories[self.query.name]
        if self._liveness is None:
            return list(history)
        alive = alive_points(self._histories[self._liveness.name])
        newest = grid_end(now, self.query.step) - self.query.label_offset
        if not alive.get(newest, False):
            raise SourceDown(self._down(alive))
        if not self.query.zero_when_absent:
            return list(history)
        known = known_identities(self.query.split_by, history, self._known_pools())
        for gone in sorted(self._served - known):
            log.info(
                "signal %s: %s is no longer served: no node carries that pool's label and it has no point in "
                "the last %s",
                self.name,
                dict(gone),
                self.lookback,
            )
        self._served = known
        step = pd.Timedelta(self.query.step)
        return fill_absent(self.name, history, alive, known, step, self.query.label_offset)

    async def _read(self, query: SignalQuery, now: datetime) -> list[Signal]:
        try:
            if self._pulled_until is None:
                return await self.prometheus.backfill(query, now - self.lookback, now)
            since = self._pulled_until - query.step * REREAD_STEPS
            return await self.prometheus.pull_incremental(query, since, now)
        except PrometheusError as error:
            raise QueryFailed(query.name, error) from error

    async def _choose_recorded(self, now: datetime) -> None:
        """Read the signal from its recording rule from now on when Prometheus holds the rule's series
        a lookback ago (a rule installed later would give a shorter history than the raw series);
        chosen once, at the first pull."""
        recorded, series = self.query.recorded, self.query.recorded_series
        try:
            use = await self.prometheus.read_recorded_if_held(self.query, now - self.lookback)
        except PrometheusError as error:
            raise QueryFailed(self.name, error) from error
        how = "the recording rule" if use is recorded else "the raw series: nothing recorded"
        log.info("signal %s: read from %s (%s, %s of lookback)", self.name, how, series, self.lookback)
        self.query = self._queries[0] = use

    def _known_pools(self) -> set[str]:
        pools = newest_pools(self._histories[self._pools.name]) if self._pools is not None else set()
        return pools | set(self.known_pools() if self.known_pools is not None else ())

    def _down(self, alive: pd.Series) -> str:
        seen = alive[alive]
        since = f"since {seen.index[-1] + self.query.label_offset:%Y-%m-%dT%H:%M:%SZ}" if len(seen) else "at all"
        lookback = "" if len(seen) else f" in the last {self.lookback}"
        return f"its exporter shows no sign of life {since}{lookback} (liveness: {self.query.liveness})"
