"""Serving values from before the refresher's first forecast: those another replica published, or
those this one saved before a restart; and the targets' records, saved and restored."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from autoscaler.refresh.pipeline import Pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.replication import lead_time_store
from autoscaler.replication.forecast_objects import Published
from autoscaler.serving import persistence
from autoscaler.serving.provider import Snapshot
from autoscaler.targets import target_store
from autoscaler.targets.candidates import CANDIDATE_LEVELS
from autoscaler.web.shared.readiness import Readiness

log = logging.getLogger(__name__)

# The targets' records are saved at most this often: a crash loses at most this much of a week.
TARGETS_SAVE_EVERY_S = 600.0


def restore_published(refresher: Refresher, readiness: Readiness, pipeline: Pipeline, published: Published) -> None:
    """Values, step-down pacing, targets' choices and lead-time samples as the objects hold them
    (another pod's)."""
    snapshot = published.snapshot(refresher.metrics, refresher.clock())
    restore(refresher, readiness, snapshot, "published in GPUForecasts", "read from the Kubernetes API")
    refresher.restore_pacing(published.pacing)
    refresher.levels.restore(list(published.choices.values()))  # a local targets.json, read next, wins
    if pipeline.lead_times is not None:
        samples = pipeline.lead_times.restore(published.lead_time_samples)
        log.info("restored %d NodeClaim lead-time samples published in GPUForecasts", samples)


def serving_published(readiness: Readiness, snapshot: Snapshot) -> None:
    if any(snapshot.series.values()):
        readiness.ready, readiness.reason = (
            True,
            f"serving published forecasts ({snapshot.created_at:%Y-%m-%dT%H:%M:%SZ})",
        )


def restore(refresher: Refresher, readiness: Readiness, restored: Snapshot, how: str, where: str) -> None:
    if not any(restored.series.values()):
        return
    refresher.restore(restored)
    readiness.ready = True
    readiness.reason = f"serving values {how} at {restored.created_at:%Y-%m-%dT%H:%M:%SZ}; first forecast pending"
    log.info("restored served values %s at %s %s", how, restored.created_at, where)


def restore_saved(refresher: Refresher, readiness: Readiness, pipeline: Pipeline, state_dir: Path) -> None:
    """The values and NodeClaim lead-time samples saved in the state directory before a restart, if any."""
    if pipeline.lead_times is not None:
        path = state_dir / lead_time_store.FILE_NAME
        restored_samples = pipeline.lead_times.restore(lead_time_store.load(path))
        log.info("restored %d NodeClaim lead-time samples from %s", restored_samples, path)
    saved_values = state_dir / persistence.FILE_NAME
    restored = persistence.load(saved_values, pipeline.metrics)
    if restored is not None:
        restore(refresher, readiness, restored, "saved", f"from {saved_values}")
    targets_path = state_dir / target_store.FILE_NAME
    states = target_store.load(targets_path, columns=2 + len(CANDIDATE_LEVELS))
    refresher.levels.restore(states)
    if states:
        log.info("restored the record of %d metrics served to a target from %s", len(states), targets_path)


def save_targets_soon(refresher: Refresher, state_dir: Path) -> asyncio.Future[None] | None:
    """The targets' records, saved off the event loop, at most every ``TARGETS_SAVE_EVERY_S``: the
    save's future, None when not saved now."""
    levels = refresher.levels
    now = time.monotonic()
    if levels.saved_at is not None and now - levels.saved_at < TARGETS_SAVE_EVERY_S:
        return None
    states = levels.states()
    if not states:
        return None
    levels.saved_at = now
    path = state_dir / target_store.FILE_NAME
    return asyncio.get_running_loop().run_in_executor(None, _save_targets_quietly, path, states)


def _save_targets_quietly(path: Path, states: Sequence[target_store.TunerState]) -> None:
    try:
        target_store.save(path, states)
    except OSError as error:  # a read-only or full disk must not stop serving
        log.warning("could not save the targets' records to %s: %s", path, error)
