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

``ready`` says whether every standby is held (once true, it stays true): a replica still warming
does not take shards from live replicas (``ShardOwnership``), so that a restarted replica takes
its share back warm.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from autoscaler.refresh import fitting
from autoscaler.refresh.fitting import SeriesKey
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import WorkFailed

log = logging.getLogger(__name__)


class Standby:
    """Keeps fitted, in this replica's workers, the published models of series it does not own."""

    def __init__(self, refresher: Refresher, published_models: Callable[[], Mapping[SeriesKey, str]]) -> None:
        self.refresher = refresher
        # Series of shards other replicas own -> the model their owner published for them.
        self.published_models = published_models
        self.fits = 0
        self.failures = 0
        self.due_count: int | None = None  # standby fits still due (None: no pass yet)
        self._ready = False

    def ready(self) -> bool:
        """Whether every standby has been held once (a newcomer's warm-up is over)."""
        self._ready = self._ready or self.due_count == 0
        return self._ready

    def held(self) -> int:
        return len(self.refresher.schedule.standby)

    def due(self) -> list[tuple[SeriesKey, str]]:
        """Series pulled at the last refresh, of a shard another replica owns, whose standby is due."""
        refresher = self.refresher
        owns, now = refresher.owns or (lambda key: True), refresher.clock()
        published = self.published_models()
        return [
            (key, model)
            for key, model in sorted(published.items())
            if key in refresher.pulled and not owns(key) and refresher.schedule.standby_due(key, model, now)
        ]

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
        due = self.due()
        self.due_count = len(due)
        failures: list[str] = []
        for key, model in due:
            owns = refresher.owns or (lambda key: True)
            signal = refresher.pulled.get(key)
            if signal is None or owns(key):  # taken over since: its refresh fits it
                self.due_count -= 1
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
            self.due_count -= 1
            if not owns(key):
                refresher.schedule.warmed(key, model, now)
        if failures:  # one line a pass; the next pass tries them again
            log.warning("standby models: %d fits failed, e.g. %s", len(failures), failures[0])

    async def _drop_gone(self) -> None:
        """Standbys of series a pull of their signal no longer has (a pool that disappeared)."""
        refresher = self.refresher
        names = {name for name, _ in refresher.pulled}
        gone = [key for key in refresher.schedule.standby if key[0] in names and key not in refresher.pulled]
        for key in gone:
            refresher.schedule.standby.pop(key, None)
        if gone:
            await fitting.drop_held_models(refresher.pools, refresher.scope, gone)
