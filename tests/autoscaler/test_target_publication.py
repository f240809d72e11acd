"""A metric served to a target carries its choice to the next pod through the GPUForecast objects
(the fake API validates them against manifests/base/crd-gpuforecasts.yaml): a rollout or a shard
handover serves the same candidate at once instead of p95 for a day."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from adapters.kubernetes.watch import WatchSettings
from autoscaler.app.restoring import restore_published
from autoscaler.config.publication_settings import PublicationSettings
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.replication.forecast_objects import read_objects
from autoscaler.replication.publication import open_publication, signals_of
from autoscaler.scorecard.figures import parse_fraction_target
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.simulation.replay import replay_levels
from autoscaler.targets.plans import RefreshSettings
from autoscaler.targets.target_store import TunerState
from autoscaler.web.shared.readiness import Readiness
from tests.autoscaler import test_publication
from tests.autoscaler.test_publication import (
    HOME,
    KEY,
    METRICS,
    NAMESPACE,
    PLANS,
    SHARDS,
    Clock,
    TraceSource,
    gpuforecast,
    publisher,
    refresher,
)

pool = test_publication.pool  # the fixture: a forecast worker pool
TARGET = parse_fraction_target("1%")
REASON = "chosen by replaying 11 levels and 45 buffers over the last 7.0 days: a buffer of 24 GPUs met it"


def target_plans(target: str = "1%") -> tuple:
    return (PLANS[0], replace(PLANS[1], target=parse_fraction_target(target)))


def new_pod(workers: object, clock: Clock, target: str = "1%") -> tuple[Refresher, Pipeline]:
    settings = RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=10))
    pipeline = Pipeline(
        metrics=METRICS, plans=target_plans(target), sources=[TraceSource()], refresh=settings, replay=replay_levels
    )
    provider = SnapshotProvider(empty_snapshot(METRICS), clock=clock)
    return Refresher(provider=provider, inputs=pipeline, pools=workers, clock=clock), pipeline


async def test_a_targets_choice_is_published_and_the_next_pod_serves_it(fake_kube, kube_api, pool):
    clock = Clock()
    first = refresher(pool, clock)
    snapshot = await first.refresh_once()
    chosen_at = clock().timestamp() - 3600
    choice = TunerState(
        "gpu_headroom", KEY, TARGET, 8, 60.0, "buffer:24", 0.009, chosen_at, REASON, 600.0, False, (),
        (), (),
    )  # fmt: skip
    await publisher(kube_api, clock).publish(snapshot, first.pacing, choices={("gpu_headroom", KEY): choice})
    items = fake_kube.get("gpuforecasts", HOME, NAMESPACE)["status"]["items"]
    assert [item["metric"] for item in items] == ["gpu_demand_forecast", "gpu_headroom"]
    assert "target" not in items[0]
    assert items[1]["target"] == {
        "kind": "minutes_short_fraction",
        "value": 0.01,
        "chosen": "buffer:24",
        "asked": 0.009,
        "chosenAt": "2026-11-20T08:00:00Z",
        "reason": REASON,
    }

    # A new pod (a rollout: empty state dir) restores from the objects and serves the same buffer.
    settings = PublicationSettings(enabled=True, namespace=NAMESPACE, shards=SHARDS)
    served = SnapshotProvider(empty_snapshot(METRICS), clock=clock)
    async with open_publication(
        settings, kube_api, served=served, metrics=METRICS, plans=PLANS, watch_settings=WatchSettings()
    ) as publication:
        assert publication.initial is not None and publication.initial.problems == []
        fresh, pipeline = new_pod(pool, clock)
        restore_published(fresh, Readiness(), pipeline, publication.initial)
    clock.now += timedelta(minutes=1)
    headroom = (await fresh.refresh_once()).series["gpu_headroom"][0]
    assert "a buffer of 24 GPUs above the GPUs requested now" in headroom.explanation
    assert headroom.explanation.endswith(
        f"; target: at most 1 % of minutes with any GPU short: a buffer of 24 GPUs plus the windows due ({REASON})"
    )
    # It publishes the choice on in turn, unchanged, and chooses again once it has a day of record.
    carried = fresh.levels.choices()[("gpu_headroom", KEY)]
    assert (carried.chosen, carried.asked, carried.chosen_at, carried.target) == ("buffer:24", 0.009, chosen_at, TARGET)
    tuner = fresh.levels._tuners[("gpu_headroom", KEY)]
    assert not tuner.due(clock().timestamp() + 3600)

    # A pod configured with another target does not take the choice.
    other, other_pipeline = new_pod(pool, clock, "0.3%")
    restore_published(other, Readiness(), other_pipeline, publication.initial)
    assert "p95 (no choice yet" in (await other.refresh_once()).series["gpu_headroom"][0].explanation


def test_a_choice_that_cannot_be_read_is_named_and_the_value_still_served():
    item = {
        "metric": "gpu_headroom",
        "labels": {"pool": "earth"},
        "value": 12.0,
        "timestamp": "2026-11-20T09:00:00Z",
        "target": {"kind": "minutes_short_fraction", "value": 0.01, "chosen": "p95", "asked": 0.01,
                   "chosenAt": "2026-11-20T08:00:00Z"},
    }  # fmt: skip
    published = read_objects([gpuforecast(1, SHARDS, item)], dict(zip([m.name for m in METRICS], METRICS, strict=True)),
                             signals_of(PLANS), SHARDS)  # fmt: skip
    assert [series.value for series in published.series["gpu_headroom"]] == [12.0]
    assert published.choices == {}
    assert published.problems == [
        "GPUForecast shard-1-of-4 status.items[0]: gpu_headroom: the target's choice is not carried on: "
        "target.chosen 'p95' is not a level or a buffer this version chooses among"
    ]
