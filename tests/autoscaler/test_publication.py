"""Forecasts published as GPUForecast objects, against the fake API with the real client.

A real Refresher forecasts a real trace (Helios Earth running GPUs) in a thread pool; the Publisher
writes what it serves; a second provider fed by a watch of the objects serves the same items; a
fresh refresher restores values and step-down pacing from the objects.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from adapters.kubernetes.gpuforecasts import ForecastWriter, gpuforecast_resource
from adapters.kubernetes.nodeclaims import LeadTimeHistory
from adapters.kubernetes.watch import WatchGroup, WatchSettings
from adapters.traces.replay import ReplaySource, read_trace
from adapters.types import AdapterError, Signal
from autoscaler.config.publication_settings import PublicationSettings
from autoscaler.config.settings import Settings
from autoscaler.refresh import demo
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.replication.forecast_objects import (
    object_name,
    pool_key,
    read_objects,
    rfc3339,
    shard_of,
    shard_statuses,
)
from autoscaler.replication.publication import PublishedView, Publisher, open_publication, signals_of
from autoscaler.selectors import EVERYTHING
from autoscaler.serving.provider import MetricInfo, PublishedRecord, SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import MetricPlan, RefreshInputs, RefreshSettings, SignalSource
from tests.eventually import eventually

NAMESPACE = "gpu-autoscaler"
SHARDS = 4
METRICS = (MetricInfo("gpu_demand_forecast", "demand"), MetricInfo("gpu_headroom", "headroom"))
PLANS = (
    MetricPlan("gpu_demand_forecast", "gpus", "demand", 0.9, max_decrease_per_minute=2.0),
    MetricPlan("gpu_headroom", "gpus", "headroom", 0.9),
)
KEY = ("gpus", (("pool", "earth"),))
HOME = object_name(shard_of(KEY, SHARDS), SHARDS)
PATH = f"/apis/gpu-autoscaler.io/v1alpha1/namespaces/{NAMESPACE}/gpuforecasts"


class TraceSource:
    """The trace replayed up to the test clock, scaled by ``factor``; fails when told to."""

    name = "gpus"

    def __init__(self) -> None:
        trace = read_trace(demo._trace("helios_earth_running_gpus_5m.csv.gz"))
        self.replay = ReplaySource("gpus", trace, {"pool": "earth"}, anchor=trace.index[0].to_pydatetime())
        self.factor = 1.0
        self.failing = False

    async def pull(self, now: datetime) -> list[Signal]:
        if self.failing:
            raise AdapterError("prometheus unreachable")
        signal = self.replay.history(now, timedelta(days=3))
        return [replace(signal, series=signal.series * self.factor)]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def pool():
    executor = ThreadPoolExecutor(max_workers=1)
    yield ForecastPools([executor])
    executor.shutdown()


def refresher(
    pool: ForecastPools, clock: Clock, source: SignalSource | None = None, provider: SnapshotProvider | None = None
) -> Refresher:
    settings = RefreshSettings(
        interval=timedelta(minutes=1), lead_time=timedelta(minutes=10), reselect_every=timedelta(hours=1)
    )
    return Refresher(
        provider=provider or SnapshotProvider(empty_snapshot(METRICS), clock=clock),
        inputs=RefreshInputs(metrics=METRICS, plans=PLANS, sources=[source or TraceSource()], refresh=settings),
        pools=pool,
        clock=clock,
    )


def publisher(kube_api, clock, attempts=3):
    writer = ForecastWriter(kube_api, NAMESPACE, attempts=attempts)
    return Publisher(writer, shards=SHARDS, signal_of=signals_of(PLANS), clock=clock)


def served_items(provider, metric):
    return [series.item for series in provider.get_metric("default", metric, EVERYTHING)]


def writes(fake_kube, since=0):
    return [(r.method, r.path, r.status) for r in fake_kube.requests_for("gpuforecasts", watch=False)[since:]]


async def test_publishes_what_is_served_one_object_per_shard(fake_kube, kube_api, pool):
    clock = Clock()
    instance = refresher(pool, clock)
    snapshot = await instance.refresh_once()
    await publisher(kube_api, clock).publish(snapshot, instance.pacing)

    objects = {obj["metadata"]["name"]: obj for obj in fake_kube.items("gpuforecasts")}
    assert sorted(objects) == [f"shard-{shard}-of-4" for shard in range(SHARDS)]
    home = objects[HOME]
    assert home["spec"] == {"shard": shard_of(KEY, SHARDS), "shards": SHARDS}
    assert home["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-autoscaler"}
    demand, headroom = snapshot.series["gpu_demand_forecast"][0], snapshot.series["gpu_headroom"][0]
    provenance = demand.provenance
    assert home["status"]["items"][0] == {
        "metric": "gpu_demand_forecast",
        "labels": {"pool": "earth"},
        "value": demand.value,
        "timestamp": rfc3339(demand.timestamp),
        "explanation": demand.explanation,
        "model": provenance.model,
        "quantile": 0.9,
        "work": "select",
        "decidedAt": "2026-11-20T09:00:00Z",
        "peakAt": rfc3339(provenance.peak_at),
        "leadTime": {"seconds": 600, "source": "configured"},
        "windows": [],
        "adjustments": [
            {"kind": a.kind, "before": a.before, "after": a.after, "reason": a.reason} for a in provenance.adjustments
        ],
        "stepDown": {"value": demand.value, "at": "2026-11-20T09:00:00Z"},
    }
    assert home["status"]["items"][1]["metric"] == "gpu_headroom"
    assert home["status"]["items"][1]["value"] == headroom.value
    summary = {key: value for key, value in home["status"].items() if key != "items"}
    assert summary == {
        "seriesCount": 2,
        "metrics": "gpu_demand_forecast, gpu_headroom",
        "labels": "pool=earth x2",
        "models": f"{provenance.model} x2",
        "newestTimestamp": rfc3339(demand.timestamp),
        "publishedAt": "2026-11-20T09:00:00Z",
    }
    empty = [obj["status"] for name, obj in objects.items() if name != HOME]
    assert empty == [
        {
            "seriesCount": 0,
            "metrics": "",
            "labels": "",
            "models": "",
            "items": [],
            "publishedAt": "2026-11-20T09:00:00Z",
        }
    ] * (SHARDS - 1)


async def test_writes_only_the_objects_whose_content_changed(fake_kube, kube_api, pool):
    clock = Clock()
    instance, publishing = refresher(pool, clock), publisher(kube_api, clock)
    snapshot = await instance.refresh_once()
    await publishing.publish(snapshot, instance.pacing)
    # Each object once: looked for (404), created, its status written.
    assert sorted(writes(fake_kube)) == sorted(
        [("GET", f"{PATH}/shard-{s}-of-4", 404) for s in range(SHARDS)]
        + [("POST", PATH, 201)] * SHARDS
        + [("PUT", f"{PATH}/shard-{s}-of-4/status", 200) for s in range(SHARDS)]
    )
    before = len(writes(fake_kube))
    clock.now += timedelta(seconds=10)  # publishedAt would differ: content did not
    await publishing.publish(snapshot, instance.pacing)
    assert writes(fake_kube, before) == []
    assert publishing.stats.unchanged == SHARDS

    clock.now += timedelta(minutes=5)
    await publishing.publish(await instance.refresh_once(), instance.pacing)
    # New values of the one series: its shard only, one conditional update (the version is known).
    assert writes(fake_kube, before) == [("PUT", f"{PATH}/{HOME}/status", 200)]
    assert publishing.stats.writes == SHARDS + 1


async def test_a_conflict_is_retried_from_a_fresh_read(fake_kube, kube_api, pool):
    clock = Clock()
    instance, publishing = refresher(pool, clock), publisher(kube_api, clock)
    await publishing.publish(await instance.refresh_once(), instance.pacing)
    stored = fake_kube.get("gpuforecasts", HOME, NAMESPACE)
    fake_kube.modify("gpuforecasts", {**stored, "status": {**stored["status"], "models": "edited elsewhere"}})
    before = len(writes(fake_kube))

    clock.now += timedelta(minutes=5)
    snapshot = await instance.refresh_once()
    await publishing.publish(snapshot, instance.pacing)
    assert writes(fake_kube, before) == [
        ("PUT", f"{PATH}/{HOME}/status", 409),
        ("GET", f"{PATH}/{HOME}", 200),
        ("PUT", f"{PATH}/{HOME}/status", 200),
    ]
    assert publishing.writer.counts.conflicts == 1 and publishing.stats.failures == 0
    status = fake_kube.get("gpuforecasts", HOME, NAMESPACE)["status"]
    assert status["items"][0]["value"] == snapshot.series["gpu_demand_forecast"][0].value
    assert status["models"] != "edited elsewhere"


async def test_failed_writes_are_counted_and_logged_never_raised(fake_kube, kube_api, pool, caplog):
    clock = Clock()
    instance, publishing = refresher(pool, clock), publisher(kube_api, clock)
    snapshot = await instance.refresh_once()
    fake_kube.fail(status=503, plural="gpuforecasts", times=None)
    with caplog.at_level(logging.WARNING, "autoscaler.replication.publication"):
        await publishing.publish(snapshot, instance.pacing)
    assert publishing.stats.failures == SHARDS and publishing.stats.writes == 0
    assert f"GPUForecast {HOME} not published: get gpuforecasts {NAMESPACE}/{HOME}: HTTP 503" in caplog.text
    fake_kube.faults.clear()
    await publishing.publish(snapshot, instance.pacing)  # nothing was recorded as written: all retried
    assert publishing.stats.writes == SHARDS


async def test_a_second_instance_serves_identical_items_from_the_objects(fake_kube, kube_api, pool):
    clock = Clock()
    instance, publishing = refresher(pool, clock), publisher(kube_api, clock)
    reader = SnapshotProvider(empty_snapshot(METRICS), clock=clock)
    view = PublishedView(reader, metrics=METRICS, signal_of=signals_of(PLANS), shards=SHARDS)

    def identical() -> bool:
        for metric in ("gpu_demand_forecast", "gpu_headroom"):
            assert served_items(reader, metric) == served_items(instance.provider, metric)
        return True

    async with WatchGroup(WatchSettings()) as group:
        group.start(gpuforecast_resource(kube_api, NAMESPACE), view.on_change)
        for _ in range(2):  # the first publication, then the next refresh's
            await publishing.publish(await instance.refresh_once(), instance.pacing)
            await eventually(identical, message="the reader serves what the publisher serves")
            clock.now += timedelta(minutes=5)
    # The inspection API's fields come from what the publisher recorded.
    made = instance.provider.snapshot.series["gpu_demand_forecast"][0].provenance
    record = reader.snapshot.series["gpu_demand_forecast"][0].published
    assert record == PublishedRecord(
        model=made.model, quantile=0.9, lead_time_seconds=600, lead_time_source="configured", windows=(),
        as_published=record.as_published,
    )  # fmt: skip
    assert record.as_published["decidedAt"] == rfc3339(made.decided_at)
    assert record.as_published["work"] == made.work


async def test_a_fresh_instance_serves_the_published_values_and_keeps_pacing(fake_kube, kube_api, pool):
    clock = Clock()
    first = refresher(pool, clock)
    await publisher(kube_api, clock).publish(await first.refresh_once(), first.pacing)
    published = served_items(first.provider, "gpu_demand_forecast")
    paced_from = first.pacing[("gpu_demand_forecast", KEY)][0]

    # A new pod (empty state dir): its source is down, so all it serves comes from the objects.
    settings = PublicationSettings(enabled=True, namespace=NAMESPACE, shards=SHARDS)
    source = TraceSource()
    source.failing = True
    fresh = refresher(pool, clock, source)
    served = SnapshotProvider(empty_snapshot(METRICS), clock=clock)
    async with open_publication(
        settings, kube_api, served=served, metrics=METRICS, plans=PLANS, watch_settings=WatchSettings()
    ) as publication:
        assert publication.initial is not None and publication.initial.problems == []
        fresh.restore(publication.initial.snapshot(fresh.metrics, clock()))
        fresh.restore_pacing(publication.initial.pacing)
    assert served_items(fresh.provider, "gpu_demand_forecast") == published
    await fresh.refresh_once()  # the pull fails: the published values stay
    assert served_items(fresh.provider, "gpu_demand_forecast") == published
    # Published again from the new pod, a restored value keeps everything the first pod recorded, so
    # a publisher that knows the object (as one taking a shard over does) has nothing to write.
    republished = shard_statuses(fresh.provider.snapshot, signals_of(PLANS), fresh.pacing, SHARDS)
    first_status = dict(fake_kube.get("gpuforecasts", HOME, NAMESPACE)["status"])
    assert {"work", "decidedAt", "adjustments", "peakAt"} <= first_status["items"][0].keys()
    first_status.pop("publishedAt")
    assert republished[shard_of(KEY, SHARDS)] == first_status
    seeded = publisher(kube_api, clock)
    seeded.seed(fake_kube.items("gpuforecasts"))
    before = len(writes(fake_kube))
    await seeded.publish(fresh.provider.snapshot, fresh.pacing)
    assert (seeded.stats.writes, writes(fake_kube)[before:]) == (0, [])

    # Demand falls to a tenth: the restored pod steps down from the published value, as the first
    # pod would have; a pod without the published pacing state drops at once.
    clock.now += timedelta(minutes=1)
    source.failing, source.factor = False, 0.1
    paced = (await fresh.refresh_once()).series["gpu_demand_forecast"][0]
    unpaced_source = TraceSource()
    unpaced_source.factor = 0.1
    unpaced = (await refresher(pool, clock, unpaced_source).refresh_once()).series["gpu_demand_forecast"][0]
    assert paced.value == pytest.approx(paced_from - 2.0)
    assert [a.kind for a in paced.provenance.adjustments][-1] == "step_down"
    assert f"stepping down from {paced_from:.2f}" in paced.explanation
    assert unpaced.value < paced_from / 2
    assert "step_down" not in [a.kind for a in unpaced.provenance.adjustments]


def published_item(metric, value, **labels):
    return {"metric": metric, "labels": labels, "value": value, "timestamp": "2026-11-20T09:00:00Z"}


def gpuforecast(shard, shards, *items):
    return {
        "metadata": {"name": object_name(shard, shards), "namespace": NAMESPACE},
        "spec": {"shard": shard, "shards": shards},
        "status": {"seriesCount": len(items), "items": list(items)},
    }


async def test_unusable_items_are_ignored_with_a_clear_log_and_the_rest_served(fake_kube, kube_api, caplog):
    # All accepted by the CRD's schema (the fake API validates), none servable as written.
    fake_kube.add(
        "gpuforecasts",
        gpuforecast(
            1, SHARDS, published_item("gpu_headroom", 3.0, pool="earth"), published_item("gpu_demand_forecast", 1e12)
        ),
    )
    fake_kube.add("gpuforecasts", gpuforecast(0, 8, published_item("gpu_headroom", 99.0, pool="mars")))
    fake_kube.add("gpuforecasts", gpuforecast(2, SHARDS, published_item("not_configured_here", 5.0, pool="earth")))
    clock = Clock()
    reader = SnapshotProvider(empty_snapshot(METRICS), clock=clock)
    view = PublishedView(reader, metrics=METRICS, signal_of=signals_of(PLANS), shards=SHARDS)
    with caplog.at_level(logging.WARNING, "autoscaler.replication.publication"):
        async with WatchGroup(WatchSettings()) as group:
            group.start(gpuforecast_resource(kube_api, NAMESPACE), view.on_change)
            await eventually(lambda: reader.snapshot.series["gpu_headroom"], message="the readable item is served")
    assert served_items(reader, "gpu_headroom") == [
        {"metricLabels": {"pool": "earth"}, "timestamp": "2026-11-20T09:00:00Z", "value": "3"}
    ]
    assert reader.snapshot.series["gpu_demand_forecast"] == ()
    assert caplog.messages == [
        "ignoring GPUForecast shard-1-of-4 status.items[1]: gpu_demand_forecast: 1e+12 is above 1e+09, "
        "more than any cluster has"
    ]


def test_items_of_another_version_that_cannot_be_read_are_named_and_skipped():
    """Objects the CRD of this version would refuse (written under another schema): read_objects is
    pure, so they are given to it directly rather than slipped past the fake API's validation."""
    good = published_item("gpu_headroom", 3.0, pool="earth")
    objects = [
        gpuforecast(
            0, SHARDS, good, {**good, "value": "many"}, {**good, "labels": ["pool"]}, {"metric": "gpu_headroom"}
        ),
        gpuforecast(1, SHARDS, {**good, "timestamp": "yesterday"}, {**good, "stepDown": {"value": 1.0}}),
        {
            "metadata": {"name": "shard-3-of-4"},
            "spec": {"shard": 3, "shards": SHARDS},
            "status": {
                "leadTimeSamples": [
                    {
                        "nodepool": "a100",
                        "uid": "u",
                        "created": "2026-11-20T07:00:00Z",
                        "ready": "2026-11-20T06:00:00Z",
                        "condition": "Ready",
                    },
                    {"nodepool": "a100", "created": "2026-11-20T07:00:00Z", "ready": "2026-11-20T07:05:00Z"},
                ]
            },
        },
        {"metadata": {"name": "shard-2-of-4"}, "spec": {"shard": 2, "shards": SHARDS}, "status": {"items": "all"}},
    ]
    published = read_objects(objects, {m.name: m for m in METRICS}, signals_of(PLANS), SHARDS)
    assert [s.value for s in published.series["gpu_headroom"]] == [3.0]
    assert published.problems == [
        "GPUForecast shard-0-of-4 status.items[1]: ValueError: could not convert string to float: 'many'",
        "GPUForecast shard-0-of-4 status.items[2]: AttributeError: 'list' object has no attribute 'items'",
        "GPUForecast shard-0-of-4 status.items[3]: KeyError: 'value'",
        "GPUForecast shard-1-of-4 status.items[0]: gpu_headroom: timestamp 'yesterday' is not an RFC 3339 time "
        "with a zone",
        "GPUForecast shard-1-of-4 status.items[1]: KeyError: 'at'",
        "GPUForecast shard-3-of-4 status.leadTimeSamples[0]: created '2026-11-20T07:00:00Z' and ready "
        "'2026-11-20T06:00:00Z' are not two times in order",
        "GPUForecast shard-3-of-4 status.leadTimeSamples[1]: KeyError: 'uid'",
        "GPUForecast shard-2-of-4: status.items is not a list",
    ]
    assert published.lead_time_samples == []


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"publication": {"serve_from": "objects"}},
            "publication.serve_from 'objects' needs publication.enabled: true",
        ),
        (
            {"publication": {"enabled": True, "publish": False}},
            "publication.publish false (a reading replica) needs publication.serve_from 'objects'",
        ),
        (
            {"publication": {"enabled": True}, "demo": {"enabled": True}},
            "publication needs the Kubernetes API, which the demo does not use; disable one",
        ),
        ({"publication": {"shards": 0}}, "Input should be greater than or equal to 1"),
        ({"publication": {"namespace": "Not_A_Namespace"}}, "String should match pattern"),
    ],
)
def test_publication_settings_refuse_what_cannot_work(document, message):
    with pytest.raises(ValidationError) as refused:
        Settings.model_validate(document)
    assert message in str(refused.value)


def launched(name, pool, created, seconds):
    """A NodeClaim of ``pool`` that became Ready ``seconds`` after it was created."""
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"karpenter.sh/nodepool": pool},
            "creationTimestamp": rfc3339(created),
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(created + timedelta(seconds=seconds))}
            ]
        },
    }


async def test_lead_time_samples_are_published_and_a_new_pod_keeps_learning_from_them(fake_kube, kube_api):
    clock = Clock()
    t0 = clock.now - timedelta(hours=3)
    claims = [
        launched("a", "a100", t0, 300),
        launched("b", "a100", t0 + timedelta(hours=1), 420),
        launched("c", "h100", t0, 200),
    ]
    learned = LeadTimeHistory()
    learned.observe_all(claims)
    await publisher(kube_api, clock).publish(empty_snapshot(METRICS), {}, learned.samples())

    def published_samples(pool):
        obj = fake_kube.get("gpuforecasts", object_name(shard_of(pool_key(pool), SHARDS), SHARDS), NAMESPACE)
        return [sample for sample in obj["status"]["leadTimeSamples"] if sample["nodepool"] == pool]

    assert published_samples("a100") == [
        {"nodepool": "a100", "name": "a", "uid": "uid-a", "created": "2026-11-20T06:00:00Z",
         "ready": "2026-11-20T06:05:00Z", "condition": "Ready"},
        {"nodepool": "a100", "name": "b", "uid": "uid-b", "created": "2026-11-20T07:00:00Z",
         "ready": "2026-11-20T07:07:00Z", "condition": "Ready"},
    ]  # fmt: skip
    assert [sample["name"] for sample in published_samples("h100")] == ["c"]

    # A new pod: NodeClaims a and c were consolidated away; only b is still in the cluster.
    fresh = LeadTimeHistory()
    fresh.observe(claims[1])
    settings = PublicationSettings(enabled=True, namespace=NAMESPACE, shards=SHARDS)
    served = SnapshotProvider(empty_snapshot(METRICS), clock=clock)
    async with open_publication(
        settings, kube_api, served=served, metrics=METRICS, plans=PLANS, watch_settings=WatchSettings()
    ) as publication:
        assert publication.initial is not None
        assert fresh.restore(publication.initial.lead_time_samples) == 2  # a and c; b it knew
    for pool in ("a100", "h100"):
        assert fresh.estimate(pool, 0.9) == learned.estimate(pool, 0.9)
