"""Signal sources built from the settings: Prometheus queries with their history kept in memory."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from adapters import presets
from adapters.prometheus import PrometheusClientSettings, PrometheusSource
from adapters.promql import SignalQuery, merge_signals
from adapters.types import Signal
from autoscaler.settings import PrometheusSettings, SignalSettings

# Late scrapes and rule evaluations can fill in the newest points after we first read them; every
# pull re-reads this many steps, and merging lets the newer values win.
REREAD_STEPS = 3


def signal_query(spec: SignalSettings) -> SignalQuery:
    """The PromQL a configured signal stands for."""
    # Only what the settings give: unset fields keep the query's or the preset's own defaults.
    options: dict[str, Any] = {"per_step": spec.per_step} if spec.per_step is not None else {}
    if spec.query is not None:
        return SignalQuery(name=spec.name, promql=spec.query, step=spec.step, split_by=spec.by or (), **options)
    if spec.by is not None:
        options["by"] = spec.by
    if spec.preset == "request_rate":
        assert spec.metric is not None  # noqa: S101 - settings validation guarantees it
        return presets.request_rate(
            spec.metric,
            window=spec.window,
            matchers=spec.matchers,
            step=spec.step,
            name=spec.name,
            **options,
        )
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
    )


class PrometheusSignalSource:
    """One configured signal: the whole lookback on the first pull, then only what is new.

    The history lives here between pulls, so a refresh reads a few points per series rather than
    two weeks of them. A failed pull raises (the refresher keeps serving) and leaves the history as
    it was, so the next pull fills the gap.
    """

    def __init__(self, prometheus: PrometheusSource, query: SignalQuery, lookback: timedelta) -> None:
        self.name = query.name
        self.prometheus = prometheus
        self.query = query
        self.lookback = lookback
        self._history: list[Signal] = []
        self._pulled_until: datetime | None = None

    async def pull(self, now: datetime) -> list[Signal]:
        if self._pulled_until is None:
            update = await self.prometheus.backfill(self.query, now - self.lookback, now)
        else:
            since = self._pulled_until - self.query.step * REREAD_STEPS
            update = await self.prometheus.pull_incremental(self.query, since, now)
        self._history = merge_signals(self._history, update, self.lookback)
        if update or self._pulled_until is not None:
            self._pulled_until = now
        return list(self._history)
