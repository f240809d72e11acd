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
        # Series of shards another replica owns whose published model a worker here holds fitted, and
        # when it was fitted (``standby``): a takeover forecasts from it at once instead of refitting.
        self.standby: dict[SeriesKey, tuple[str, datetime]] = {}

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
        """Continue with a model another process selected (a shard taken over), reselected on the
        usual cadence from now. Its next work is an update if a worker here holds that model fitted
        as a standby, else a refit of it (0.00-0.14 s a series against 0.06-0.18 s for a selection,
        ``benchmarks/bench_refit.py``)."""
        if key in self.selected:
            return
        self.selected[key] = (model, now)
        warm = self.standby.pop(key, None)
        if warm is not None and warm[0] == model:
            self.fitted_at[key] = warm[1]

    def standby_due(self, key: SeriesKey, model: str, now: datetime) -> bool:
        """Whether a standby fit of ``model`` is due: none held, another model held, or held for a
        selection cadence (a standby is then as recent as its owner's own fit)."""
        held = self.standby.get(key)
        return held is None or held[0] != model or now - held[1] >= self.settings.reselect_every

    def warmed(self, key: SeriesKey, model: str, now: datetime) -> None:
        self.standby[key] = (model, now)

    def to_standby(self, key: SeriesKey) -> None:
        """A series handed to another replica: the model fitted here stays, as its standby."""
        selected, fitted_at = self.selected.pop(key, None), self.fitted_at.pop(key, None)
        if selected is not None and fitted_at is not None:
            self.standby[key] = (selected[0], fitted_at)

    def forget(self, key: SeriesKey) -> None:
        self.selected.pop(key, None)
        self.fitted_at.pop(key, None)
        self.standby.pop(key, None)
