"""Which work each series gets at a refresh: a model selection, a refit or an update (see ``refresher``)."""

from __future__ import annotations

from datetime import datetime

from autoscaler.refresh.fitting import SeriesKey, WorkerResult
from autoscaler.serving.provenance import WorkKind
from autoscaler.targets.plans import RefreshSettings


class FitSchedule:
    """Which work each series gets: a selection on its cadence, a refit on its own, else an update."""

    def __init__(self, settings: RefreshSettings) -> None:
        self.settings = settings
        # The model each series last selected by full backtest, and when; when it was last fitted.
        self.selected: dict[SeriesKey, tuple[str, datetime]] = {}
        self.fitted_at: dict[SeriesKey, datetime] = {}

    def work_for(self, key: SeriesKey, now: datetime) -> tuple[WorkKind, str | None]:
        selected = self.selected.get(key)
        if selected is None or now - selected[1] >= self.settings.reselect_every:
            return "select", None
        refit_every = self.settings.refit_every
        # Never fitted here: a model selected elsewhere (``adopt``) is refitted first.
        fitted_at = self.fitted_at.get(key)
        if fitted_at is None or (refit_every is not None and now - fitted_at >= refit_every):
            return "refit", selected[0]
        return "update", selected[0]

    def done(self, key: SeriesKey, result: WorkerResult, now: datetime) -> None:
        if result.work == "select":
            self.selected[key] = (result.engine.model, now)
        if result.work != "update":
            self.fitted_at[key] = now

    def adopt(self, key: SeriesKey, model: str, now: datetime) -> None:
        """Continue with a model another process selected (a shard taken over): its next work is a
        refit of that model (0.00-0.14 s a series against 0.06-0.18 s for a selection,
        ``benchmarks/bench_refit.py``; never an
        update from models a worker may still hold from an earlier ownership), and it is reselected
        on the usual cadence from now."""
        self.selected.setdefault(key, (model, now))

    def forget(self, key: SeriesKey) -> None:
        self.selected.pop(key, None)
        self.fitted_at.pop(key, None)
