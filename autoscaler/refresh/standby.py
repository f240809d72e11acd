"""Standby models: the models other replicas publish, kept fitted here so that a takeover needs no refit.

A shard's new owner used to refit every series it took over before serving its own forecasts: 0.1 s
a series with gbm, minutes for a thousand series on two cores (docs/benchmarks/failover.md). Here a
replica fits, in the background, the model published for every series of a shard another replica
owns, and its workers keep it as they keep their own. When it takes such a shard over,
``FitSchedule.adopt`` finds the standby and the series' first work is an update from it
(milliseconds) rather than a refit. A shard handed away keeps its models the same way
(``Refresher.keep_owned``).

After each refresh, ``Standby`` refits the published model of each series whose standby is missing,
of another model, or as old as a selection cadence, one series at a time: workers take their work
first come, first served, so a refresh's own work waits behind at most one standby fit.

Standby fits wait while some series of another replica's shards has no published model yet (a
deployment's first selection under way), up to ``PUBLICATION_WAIT``: they would take the CPU that
selection needs, and the models it will publish are the ones to hold.

``ready`` says whether every standby is held (once true, it stays true): a replica still warming
does not take shards from live replicas (``ShardOwnership``), so that a restarted replica takes
its share back warm. A replica that starts before anything is published (a deployment's first
start) is ready at once: there is nothing to hold, and every replica is alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from autoscaler.refresh import fitting
from autoscaler.refresh.fitting import SeriesKey
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import WorkFailed

log = logging.getLogger(__name__)

# How long standby fits wait for every series to be published before fitting those that are.
PUBLICATION_WAIT = timedelta(minutes=10)


class Standby:
    """Keeps fitted, in this replica's workers, the published models of series it does not own."""

    def __init__(
        self,
        refresher: Refresher,
        published_models: Callable[[], Mapping[SeriesKey, str]],
        *,
        ready: bool = False,
    ) -> None:
        self.refresher = refresher
        # Series of shards other replicas own -> the model their owner published for them.
        self.published_models = published_models
        self.fits = 0
        self.failures = 0
        self.due_count: int | None = None  # standby fits still due (None: no pass yet)
        self._ready = ready  # True: started before anything was published
        self._unpublished_since: datetime | None = None

    def ready(self) -> bool:
        """Whether every standby has been held once (a newcomer's warm-up is over)."""
        self._ready = self._ready or self.due_count == 0
        return self._ready

    def held(self) -> int:
        return len(self.refresher.schedule.standby)

    def due(self) -> tuple[list[tuple[SeriesKey, str]], int]:
        """Series pulled at the last refresh, of a shard another replica owns, whose standby is due,
        and how many such series have no published model yet."""
        refresher = self.refresher
        owns, now = refresher.owns or (lambda key: True), refresher.clock()
        published = self.published_models()
        served = {plan.signal for plan in refresher.plans}
        others = sorted(key for key in refresher.pulled if key[0] in served and not owns(key))
        due = [
            (key, published[key])
            for key in others
            if key in published and refresher.schedule.standby_due(key, published[key], now)
        ]
        return due, sum(key not in published for key in others)

    async def run(self) -> None:
        """After each refresh, a pass over the standbys due (forever; cancelled with the service)."""
        refresher = self.refresher
        while True:
            await refresher.refreshed.wait()
            refresher.refreshed.clear()
            await self.warm()

    async def warm(self) -> None:
        """Fit every standby due now, one at a time; drop those of series gone from their source."""
        refresher = self.refresher
        await self._drop_gone()
        due, unpublished = self.due()
        now = refresher.clock()
        self._unpublished_since = (self._unpublished_since or now) if unpublished else None
        waiting = self._unpublished_since is not None and now - self._unpublished_since < PUBLICATION_WAIT
        # Past the wait, a series never published (its owner cannot fit it) holds nobody back.
        self.due_count = len(due) + (unpublished if waiting else 0)
        if waiting:
            return  # a first selection is under way somewhere: its CPU first, and its models
        failures: list[str] = []
        by_worker: dict[int, list[tuple[SeriesKey, str]]] = {}
        for key, model in due:
            by_worker.setdefault(refresher.pools.shard_of(key), []).append((key, model))
        # One fit at a time per worker, every worker at once: a replica with two workers warms up in
        # half the time, and each worker's refresh work still waits behind one standby fit at most.
        await asyncio.gather(*(self._fit_in_turn(work, failures) for work in by_worker.values()))
        if failures:  # one line a pass; the next pass tries them again
            log.warning("standby models: %d fits failed, e.g. %s", len(failures), failures[0])

    async def _fit_in_turn(self, work: list[tuple[SeriesKey, str]], failures: list[str]) -> None:
        refresher = self.refresher
        for key, model in work:
            owns = refresher.owns or (lambda key: True)
            signal = refresher.pulled.get(key)
            if signal is None or owns(key):  # taken over since: its refresh fits it
                self._one_done()
                continue
            now = refresher.clock()
            request = refresher.standby_request(signal, model, now)
            try:
                await refresher.pools.run(key, fitting.work_in_worker, request, request.timeout_s or 0.0)
            except WorkFailed as error:
                self.failures += 1
                failures.append(f"{key[0]}{dict(key[1])}: {error}")
                continue
            self.fits += 1
            self._one_done()
            if not owns(key):
                refresher.schedule.warmed(key, model, now)

    def _one_done(self) -> None:
        if self.due_count is not None:
            self.due_count -= 1

    async def _drop_gone(self) -> None:
        """Standbys of series a pull of their signal no longer has (a pool that disappeared)."""
        refresher = self.refresher
        names = {name for name, _ in refresher.pulled}
        gone = [key for key in refresher.schedule.standby if key[0] in names and key not in refresher.pulled]
        for key in gone:
            refresher.schedule.standby.pop(key, None)
        if gone:
            await fitting.drop_held_models(refresher.pools, refresher.scope, gone)
