"""CronJob windows: fire times (time zones, DST as the Kubernetes controller does it), GPU counts,
durations learned from past Jobs, and the whole path from the fake API server to windows."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.gpu_units import GpuUnits
from adapters.kubernetes.cron_schedule import CronScheduleError, fire_times
from adapters.kubernetes.cronjobs import (
    CronWindowSettings,
    config_windows,
    cronjob_resource,
    cronjob_windows,
    expected_duration,
    job_pods,
    job_resource,
    past_run_durations,
    unplaced_cronjobs,
    windows_for_cronjob,
)
from adapters.kubernetes.gpu_requests import parse_quantity, pod_gpu_requests
from adapters.kubernetes.watch import WatchGroup, WatchSettings
from tests import fakekube
from tests.eventually import eventually
from tests.kube_objects import expression, nodepool, taint

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def gpu_container(gpus: Any, *, key: str = "nvidia.com/gpu", field: str = "limits") -> dict:
    return {"name": "c", "image": "trainer", "resources": {field: {key: str(gpus), "cpu": "4"}}}


def make_cronjob(
    name: str = "train",
    *,
    namespace: str = "ml",
    schedule: str = "0 2 * * *",
    timezone: str | None = None,
    containers: list[dict] | None = None,
    init_containers: list[dict] | None = None,
    job_spec: dict | None = None,
    suspend: bool | None = None,
    labels: dict[str, str] | None = None,
    uid: str = "uid-train",
    node_selector: dict[str, str] | None = None,
    concurrency_policy: str | None = None,
) -> dict:
    pod_spec: dict[str, Any] = {"containers": containers or [gpu_container(1)], "restartPolicy": "Never"}
    if init_containers:
        pod_spec["initContainers"] = init_containers
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    spec: dict[str, Any] = {
        "schedule": schedule,
        "jobTemplate": {"spec": {**(job_spec or {}), "template": {"spec": pod_spec}}},
    }
    if timezone:
        spec["timeZone"] = timezone
    if suspend is not None:
        spec["suspend"] = suspend
    if concurrency_policy:
        spec["concurrencyPolicy"] = concurrency_policy
    metadata = {"name": name, "namespace": namespace, "uid": uid, "labels": labels or {}}
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": metadata, "spec": spec}


def make_job(
    started: datetime,
    minutes: float | None,
    *,
    owner_uid: str = "uid-train",
    owner_name: str = "train",
    namespace: str = "ml",
    succeeded: bool = True,
    name: str | None = None,
) -> dict:
    status: dict[str, Any] = {"startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ")}
    if minutes is not None and succeeded:
        completed = started + timedelta(minutes=minutes)
        status["completionTime"] = completed.strftime("%Y-%m-%dT%H:%M:%SZ")
        status["succeeded"] = 1
        status["conditions"] = [{"type": "Complete", "status": "True"}]
    elif not succeeded:
        status["failed"] = 1
        status["conditions"] = [{"type": "Failed", "status": "True"}]
    owner = {"apiVersion": "batch/v1", "kind": "CronJob", "name": owner_name, "uid": owner_uid}
    return {
        "metadata": {
            "name": name or f"{owner_name}-{int(started.timestamp())}",
            "namespace": namespace,
            "ownerReferences": [owner],
        },
        "status": status,
    }


# ----------------------------------------------------------------------------- fire times


def test_fire_times_in_utc_by_default():
    times = fire_times("0 2 * * *", "UTC", utc(2025, 1, 1), utc(2025, 1, 4))
    assert times == [utc(2025, 1, 1, 2), utc(2025, 1, 2, 2), utc(2025, 1, 3, 2)]


def test_fire_times_interval_is_start_inclusive_end_exclusive():
    assert fire_times("0 * * * *", "UTC", utc(2025, 1, 1, 5), utc(2025, 1, 1, 7)) == [
        utc(2025, 1, 1, 5),
        utc(2025, 1, 1, 6),
    ]


def test_fire_times_follow_the_time_zone():
    # 09:00 on weekdays in New York: 14:00 UTC in winter (EST), 13:00 UTC in summer (EDT).
    winter = fire_times("0 9 * * 1-5", "America/New_York", utc(2025, 1, 4), utc(2025, 1, 8))
    assert winter == [utc(2025, 1, 6, 14), utc(2025, 1, 7, 14)]  # Sat 4th and Sun 5th skipped
    summer = fire_times("0 9 * * 1-5", "America/New_York", utc(2025, 7, 7), utc(2025, 7, 8))
    assert summer == [utc(2025, 7, 7, 13)]


def test_spring_forward_skips_a_wall_clock_time_that_does_not_exist():
    # Europe/Berlin, 2025-03-30: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day and
    # the Kubernetes controller (robfig/cron) does not run the job at all.
    times = fire_times("30 2 * * *", "Europe/Berlin", utc(2025, 3, 29), utc(2025, 4, 1))
    assert times == [utc(2025, 3, 29, 1, 30), utc(2025, 3, 31, 0, 30)]


def test_fall_back_runs_a_repeated_wall_clock_time_twice():
    # Europe/Berlin, 2025-10-26: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    times = fire_times("30 2 * * *", "Europe/Berlin", utc(2025, 10, 25), utc(2025, 10, 28))
    assert times == [
        utc(2025, 10, 25, 0, 30),
        utc(2025, 10, 26, 0, 30),  # 02:30 CEST
        utc(2025, 10, 26, 1, 30),  # 02:30 CET
        utc(2025, 10, 27, 1, 30),
    ]


def test_interval_schedules_count_the_real_hours_of_dst_days():
    berlin_day = {
        "spring": (utc(2025, 3, 29, 23), utc(2025, 3, 30, 22)),
        "fall": (utc(2025, 10, 25, 22), utc(2025, 10, 26, 23)),
    }
    spring = fire_times("*/30 * * * *", "Europe/Berlin", *berlin_day["spring"])
    fall = fire_times("*/30 * * * *", "Europe/Berlin", *berlin_day["fall"])
    assert len(spring) == 46  # a 23-hour day
    assert len(fall) == 50  # a 25-hour day
    assert fall == sorted(set(fall))


def test_fixed_times_outside_the_dst_change_are_unaffected():
    times = fire_times("15 10 * * *", "Europe/Berlin", utc(2025, 3, 29), utc(2025, 4, 1))
    assert times == [utc(2025, 3, 29, 9, 15), utc(2025, 3, 30, 8, 15), utc(2025, 3, 31, 8, 15)]


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@hourly", [utc(2025, 5, 1, 0), utc(2025, 5, 1, 1)]),
        ("@daily", [utc(2025, 5, 1)]),
        ("@midnight", [utc(2025, 5, 1)]),
        ("@weekly", []),  # 2025-05-01 is a Thursday
        ("@monthly", [utc(2025, 5, 1)]),
        ("@yearly", []),
        ("@annually", []),
    ],
)
def test_macros_kubernetes_accepts(macro, expected):
    assert fire_times(macro, "UTC", utc(2025, 5, 1), utc(2025, 5, 1, 2)) == expected


def test_cron_tz_prefix_wins_over_the_time_zone_argument():
    times = fire_times("CRON_TZ=Asia/Tokyo 0 9 * * *", "UTC", utc(2025, 5, 1), utc(2025, 5, 2))
    assert times == [utc(2025, 5, 1, 0)]


def test_question_mark_is_any_day():
    assert fire_times("0 0 ? * *", "UTC", utc(2025, 5, 1), utc(2025, 5, 3)) == [utc(2025, 5, 1), utc(2025, 5, 2)]


@pytest.mark.parametrize(
    ("schedule", "timezone"),
    [
        ("@every 1h", "UTC"),
        ("0 0 0 * * *", "UTC"),  # seconds field: not a Kubernetes schedule
        ("61 * * * *", "UTC"),
        ("not a schedule", "UTC"),
        ("0 2 * * *", "Mars/Olympus_Mons"),
    ],
)
def test_schedules_that_cannot_be_evaluated_raise(schedule, timezone):
    with pytest.raises(CronScheduleError):
        fire_times(schedule, timezone, utc(2025, 5, 1), utc(2025, 5, 2))


def test_fire_times_need_aware_datetimes():
    with pytest.raises(ValueError, match="timezone-aware"):
        fire_times("0 * * * *", "UTC", datetime(2025, 5, 1), utc(2025, 5, 2))


def test_fire_times_limit():
    assert len(fire_times("* * * * *", "UTC", utc(2025, 5, 1), utc(2025, 5, 2), limit=10)) == 10


# ----------------------------------------------------------------------------- GPU requests


def test_quantities():
    assert parse_quantity("2") == 2
    assert parse_quantity(3) == 3
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("1k") == 1000
    assert parse_quantity("1Ki") == 1024
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity("two")


def test_the_kubernetes_client_still_has_no_quantity_parser():
    """docs/architecture.md keeps parse_quantity hand-written because kubernetes-asyncio has none; when
    it gains kubernetes' utils.quantity, use it instead (this test then fails)."""
    import importlib.util

    assert importlib.util.find_spec("kubernetes_asyncio.utils.quantity") is None


def test_pod_requests_sum_containers_and_take_the_largest_init_container():
    spec = {
        "containers": [gpu_container(1), gpu_container(2, field="requests")],
        "initContainers": [gpu_container(2), gpu_container(4)],
    }
    assert pod_gpu_requests(spec, GpuUnits()) == {"nvidia.com/gpu": 4}  # max(1 + 2, max(2, 4))
    spec["initContainers"] = [gpu_container(2)]
    assert pod_gpu_requests(spec, GpuUnits()) == {"nvidia.com/gpu": 3}


def test_sidecar_init_containers_add_to_everything_after_them():
    sidecar = {**gpu_container(1), "restartPolicy": "Always"}
    spec = {"initContainers": [sidecar, gpu_container(2)], "containers": [gpu_container(2)]}
    # init phase: sidecar 1 + init 2 = 3; run phase: app 2 + sidecar 1 = 3.
    assert pod_gpu_requests(spec, GpuUnits()) == {"nvidia.com/gpu": 3}
    spec["initContainers"] = [gpu_container(4), sidecar]
    assert pod_gpu_requests(spec, GpuUnits()) == {"nvidia.com/gpu": 4}


def test_requests_win_over_limits_and_other_resources_are_ignored():
    container = {"resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}}}
    assert pod_gpu_requests({"containers": [container]}, GpuUnits()) == {"nvidia.com/gpu": 2}
    assert pod_gpu_requests({"containers": [{"resources": {"limits": {"cpu": "8"}}}]}, GpuUnits()) == {}


def test_mig_and_time_sliced_resources_count():
    spec = {
        "containers": [
            gpu_container(2, key="nvidia.com/mig-1g.10gb"),
            gpu_container(1, key="nvidia.com/gpu.shared"),
        ]
    }
    sliced = GpuUnits.of(time_slicing={"nvidia.com/gpu.shared": 4})
    assert pod_gpu_requests(spec, sliced) == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/gpu.shared": 1}
    # A time-sliced name nobody declared is not a GPU, on this path as in the PromQL presets.
    assert pod_gpu_requests(spec, GpuUnits()) == {"nvidia.com/mig-1g.10gb": 2}
    assert pod_gpu_requests(spec, GpuUnits.of(mig=False)) == {}


def test_windows_count_physical_gpus():
    containers = [gpu_container(7, key="nvidia.com/mig-1g.10gb"), gpu_container(2, key="nvidia.com/gpu.shared")]
    cron = make_cronjob(job_spec={"parallelism": 2}, containers=containers)
    settings = replace(SETTINGS, units=GpuUnits.of(time_slicing={"nvidia.com/gpu.shared": 4}))
    (first, *_) = windows_for_cronjob(cron, [], NOW, settings)
    assert first.gpus == 2 * (7 / 7 + 2 / 4)
    assert first.labels["gpu_resource"] == "nvidia.com/gpu.shared,nvidia.com/mig-1g.10gb"


def test_pod_overhead_is_added():
    spec = {"containers": [gpu_container(1)], "overhead": {"nvidia.com/gpu": "1"}}
    assert pod_gpu_requests(spec, GpuUnits()) == {"nvidia.com/gpu": 2}


@pytest.mark.parametrize(
    ("job_spec", "pods"),
    [
        ({}, 1),
        ({"parallelism": 4}, 4),
        ({"parallelism": 4, "completions": 2}, 2),
        ({"parallelism": 0}, 0),
        ({"completions": 8}, 1),
    ],
)
def test_job_pods(job_spec, pods):
    assert job_pods(job_spec) == pods


# ----------------------------------------------------------------------------- durations

NOW = utc(2025, 6, 2, 12)
SETTINGS = CronWindowSettings(horizon=timedelta(days=2), default_duration=timedelta(minutes=45))


def test_duration_is_a_high_quantile_of_successful_runs_of_this_cronjob():
    cron = make_cronjob()
    jobs = [make_job(utc(2025, 6, 1, 2) - timedelta(days=d), minutes) for d, minutes in enumerate(range(10, 110, 10))]
    jobs += [
        make_job(utc(2025, 5, 1, 2), 1000, succeeded=False),  # failed: ignored
        make_job(utc(2025, 5, 2, 2), 999, owner_uid="someone-else"),
        make_job(utc(2025, 5, 3, 2), 999, namespace="elsewhere"),
        make_job(utc(2025, 6, 2, 2), None),  # still running
    ]
    assert len(past_run_durations(cron, jobs)) == 10
    duration, source = expected_duration(cron, jobs, SETTINGS)
    assert source == "jobs"
    assert duration == timedelta(minutes=91)  # p90 of 10..100 minutes, linear interpolation


def test_only_the_most_recent_runs_count():
    cron = make_cronjob()
    old = [make_job(utc(2025, 1, 1 + d), 500) for d in range(5)]
    recent = [make_job(utc(2025, 6, 1) - timedelta(hours=h), 10) for h in range(3)]
    settings = CronWindowSettings(max_job_samples=3)
    assert expected_duration(cron, old + recent, settings) == (timedelta(minutes=10), "jobs")


def test_jobs_matched_by_name_when_the_owner_reference_has_no_uid():
    cron = make_cronjob(uid="")
    jobs = [make_job(utc(2025, 6, 1), 30, owner_uid="")]
    assert expected_duration(cron, jobs, SETTINGS) == (timedelta(minutes=30), "jobs")


def test_duration_falls_back_to_active_deadline_then_setting():
    with_deadline = make_cronjob(job_spec={"activeDeadlineSeconds": 7200})
    assert expected_duration(with_deadline, [], SETTINGS) == (timedelta(hours=2), "activeDeadlineSeconds")
    assert expected_duration(make_cronjob(), [], SETTINGS) == (timedelta(minutes=45), "setting")


# ----------------------------------------------------------------------------- windows


def test_windows_of_a_gpu_cronjob():
    cron = make_cronjob(
        schedule="0 2 * * *",
        job_spec={"parallelism": 4},
        containers=[gpu_container(2)],
        labels={"team": "vision"},
        node_selector={"karpenter.sh/nodepool": "a100"},
    )
    jobs = [make_job(utc(2025, 6, 1, 2), 90)]
    windows = windows_for_cronjob(cron, jobs, NOW, SETTINGS)
    assert [(w.start, w.end) for w in windows] == [
        (utc(2025, 6, 3, 2), utc(2025, 6, 3, 3, 30)),
        (utc(2025, 6, 4, 2), utc(2025, 6, 4, 3, 30)),
    ]
    first = windows[0]
    assert (first.source, first.namespace, first.name) == ("cronjob", "ml", "train")
    assert first.gpus == 8
    assert first.duration_source == "jobs"
    assert first.labels == {"team": "vision", "gpu_resource": "nvidia.com/gpu", "nodepool": "a100"}


def test_a_run_still_in_progress_is_a_window_open_now():
    cron = make_cronjob(schedule="0 11 * * *")
    windows = windows_for_cronjob(cron, [make_job(utc(2025, 6, 1, 11), 120)], NOW, SETTINGS)
    assert windows[0].start == utc(2025, 6, 2, 11)
    assert windows[0].end == utc(2025, 6, 2, 13)


def test_windows_in_the_cronjob_time_zone_across_dst():
    cron = make_cronjob(schedule="30 2 * * *", timezone="Europe/Berlin")
    now = utc(2025, 3, 29, 12)
    windows = windows_for_cronjob(cron, [], now, CronWindowSettings(horizon=timedelta(days=3)))
    assert [w.start for w in windows] == [utc(2025, 3, 31, 0, 30), utc(2025, 4, 1, 0, 30)]


def test_suspended_unselected_and_gpu_less_cronjobs_have_no_windows():
    assert windows_for_cronjob(make_cronjob(suspend=True), [], NOW, SETTINGS) == []
    cpu_only = make_cronjob(containers=[{"name": "c", "resources": {"requests": {"cpu": "1"}}}])
    assert windows_for_cronjob(cpu_only, [], NOW, SETTINGS) == []
    assert windows_for_cronjob(make_cronjob(job_spec={"parallelism": 0}), [], NOW, SETTINGS) == []
    selective = CronWindowSettings(match_labels={"gpu-forecast": "true"})
    assert windows_for_cronjob(make_cronjob(), [], NOW, selective) == []
    chosen = make_cronjob(labels={"gpu-forecast": "true", "team": "x"})
    assert len(windows_for_cronjob(chosen, [], NOW, selective)) == 1


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Hourly runs of 90 minutes, seen at 10:30 (the 09:00 run has just ended).
        ("Allow", [("10:00", "11:30"), ("11:00", "12:30"), ("12:00", "13:30")]),
        # 10:00 is skipped while 09:00 runs; 12:00 while 11:00 runs.
        ("Forbid", [("11:00", "12:30")]),
        # Each run stops the previous one.
        ("Replace", [("10:00", "11:00"), ("11:00", "12:00"), ("12:00", "13:30")]),
    ],
)
def test_concurrency_policy_shapes_overlapping_runs(policy, expected):
    cron = make_cronjob(schedule="0 * * * *", job_spec={"activeDeadlineSeconds": 5400}, concurrency_policy=policy)
    settings = CronWindowSettings(horizon=timedelta(hours=2, minutes=1))
    windows = windows_for_cronjob(cron, [], utc(2025, 6, 2, 10, 30), settings)
    assert [(f"{w.start:%H:%M}", f"{w.end:%H:%M}") for w in windows] == expected


def test_a_broken_cronjob_does_not_hide_the_others(caplog):
    good = make_cronjob("good", schedule="0 13 * * *")
    broken = make_cronjob("broken", schedule="every day please", uid="uid-broken")
    bad_zone = make_cronjob("zone", timezone="Nowhere/Special", uid="uid-zone")
    windows = cronjob_windows([broken, good, bad_zone], [], NOW, CronWindowSettings(horizon=timedelta(hours=2)))
    assert [w.name for w in windows] == ["good"]
    assert "ml/broken skipped" in caplog.text
    assert "ml/zone skipped" in caplog.text


def test_cronjob_windows_are_sorted_by_start():
    late = make_cronjob("late", schedule="0 20 * * *", uid="1")
    early = make_cronjob("early", schedule="0 14 * * *", uid="2")
    windows = cronjob_windows([late, early], [], NOW, CronWindowSettings(horizon=timedelta(hours=10)))
    assert [w.name for w in windows] == ["early", "late"]


def test_config_windows_follow_the_same_rules():
    windows = config_windows(
        name="nightly-eval",
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        gpus=16,
        duration=timedelta(hours=1),
        now=utc(2025, 10, 25, 12),
        horizon=timedelta(days=1),
        namespace="eval",
        labels={"pool": "h100"},
    )
    assert [w.start for w in windows] == [utc(2025, 10, 26, 0, 30), utc(2025, 10, 26, 1, 30)]
    assert all(w.source == "config" and w.duration_source == "setting" for w in windows)
    assert windows[0].end == utc(2025, 10, 26, 1, 30)
    assert windows[0].labels == {"pool": "h100"}
    with pytest.raises(CronScheduleError):
        config_windows(
            name="x",
            cron="0 * * * *",
            timezone="UTC",
            gpus=-1,
            duration=timedelta(hours=1),
            now=NOW,
            horizon=timedelta(hours=1),
        )
    with pytest.raises(CronScheduleError):
        config_windows(
            name="x",
            cron="0 * * * *",
            timezone="UTC",
            gpus=1,
            duration=timedelta(0),
            now=NOW,
            horizon=timedelta(hours=1),
        )


# ----------------------------------------------------------------------------- end to end


@pytest.mark.looptime
async def test_windows_from_cronjobs_and_jobs_served_by_the_api(fake_kube, kube_api):
    train = fake_kube.add("cronjobs", make_cronjob("train", schedule="0 2 * * *", job_spec={"parallelism": 2}))
    fake_kube.add("cronjobs", make_cronjob("cpu", containers=[{"name": "c"}], uid="uid-cpu"))
    uid = train["metadata"]["uid"]
    for day, minutes in enumerate([50, 60, 70, 80]):
        fake_kube.add("jobs", make_job(utc(2025, 5, 28 + day, 2), minutes, owner_uid=uid))

    async with WatchGroup(WatchSettings(backoff_jitter=0.0)) as group:
        cronjobs = group.start(cronjob_resource(kube_api))
        jobs = group.start(job_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)
        await asyncio.wait_for(fake_kube.wait_for_watchers("jobs"), 5)
        windows = cronjob_windows(cronjobs.snapshot().values(), jobs.snapshot().values(), NOW, SETTINGS)
        assert [(w.name, w.gpus, w.duration_source) for w in windows] == [("train", 2.0, "jobs")] * 2
        assert windows[0].end - windows[0].start == timedelta(minutes=77)  # p90 of 50..80

        # A longer run arrives through the watch and moves the estimate.
        fake_kube.add("jobs", make_job(utc(2025, 6, 1, 2), 200, owner_uid=uid))
        await eventually(lambda: len(jobs.objects) == 5, message="the fifth Job in the watch cache")
        windows = cronjob_windows(cronjobs.snapshot().values(), jobs.snapshot().values(), NOW, SETTINGS)
        assert windows[0].end - windows[0].start == timedelta(minutes=152)  # p90 of 50, 60, 70, 80, 200


# ----------------------------------------------------------------------------- pools


def placed(cronjob: dict, **pod_fields: Any) -> dict:
    """The CronJob with fields added to its pod template's spec (affinity, tolerations)."""
    cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"].update(pod_fields)
    return cronjob


INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU_TAINT = taint("nvidia.com/gpu")
TOLERATE_GPUS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
POOLS = [
    nodepool("a100", requirements=[expression(INSTANCE_TYPE, "In", "p4d.24xlarge")], taints=[GPU_TAINT]),
    nodepool("h100", requirements=[expression(INSTANCE_TYPE, "In", "p5.48xlarge")], taints=[GPU_TAINT]),
    nodepool("cpu", requirements=[expression(INSTANCE_TYPE, "In", "m7i.large", "c7i.large")]),
]


def instance_type_affinity(*types: str) -> dict:
    term = {"matchExpressions": [expression(INSTANCE_TYPE, "In", *types)]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def test_a_window_lands_on_the_pool_its_instance_type_affinity_chooses():
    cron = placed(make_cronjob(), affinity=instance_type_affinity("p5.48xlarge"), tolerations=TOLERATE_GPUS)
    windows = windows_for_cronjob(cron, [], NOW, SETTINGS, POOLS)
    assert windows
    assert {w.labels.get("nodepool") for w in windows} == {"h100"}
    assert {w.placement for w in windows} == {""}  # one pool fits: nothing to explain


def test_several_pools_the_window_takes_karpenters_first_and_says_so():
    heavy = nodepool("reserved", weight=80, taints=[GPU_TAINT])
    cron = placed(make_cronjob(), tolerations=TOLERATE_GPUS)
    (window, *_) = windows_for_cronjob(cron, [], NOW, SETTINGS, [*POOLS, heavy])
    assert window.labels["nodepool"] == "reserved"
    assert window.placement == (
        "NodePools reserved (weight 80), h100 (weight 0), cpu (weight 0), a100 (weight 0) fit; "
        "Karpenter tries reserved first"
    )


def test_a_cronjob_that_fits_no_pool_keeps_its_window_unlabelled_and_is_reported():
    # Asks for A100 instances but does not tolerate the GPU taint.
    stray = placed(make_cronjob("stray", job_spec={"parallelism": 2}), affinity=instance_type_affinity("p4d.24xlarge"))
    windows = windows_for_cronjob(stray, [], NOW, SETTINGS, POOLS)
    assert windows and all("nodepool" not in w.labels for w in windows)
    assert windows[0].placement.startswith("fits no NodePool (a100: taint nvidia.com/gpu=:NoSchedule is not")
    fine = placed(
        make_cronjob("fine", uid="u2"), affinity=instance_type_affinity("p5.48xlarge"), tolerations=TOLERATE_GPUS
    )
    suspended = placed(make_cronjob("off", suspend=True, uid="u3"), affinity=instance_type_affinity("p4d.24xlarge"))
    (report,) = unplaced_cronjobs([stray, fine, suspended], POOLS, SETTINGS)
    assert (report.kind, report.namespace, report.name, report.gpus) == ("cronjob", "ml", "stray", 2.0)
    assert report.reason == windows[0].placement


def test_a_future_run_counts_against_the_whole_limit_not_todays_use():
    busy = nodepool("busy", limits={"nvidia.com/gpu": "8"}, gpus_in_use="8")
    small = nodepool("small", limits={"nvidia.com/gpu": "1"})
    cron = make_cronjob(containers=[gpu_container(4)])
    assert {w.labels["nodepool"] for w in windows_for_cronjob(cron, [], NOW, SETTINGS, [busy, small])} == {"busy"}


def test_without_nodepools_the_selector_names_the_pool():
    cron = make_cronjob(node_selector={"karpenter.sh/nodepool": "a100"})
    assert windows_for_cronjob(cron, [], NOW, SETTINGS, None)[0].labels["nodepool"] == "a100"
    assert "nodepool" not in windows_for_cronjob(make_cronjob(), [], NOW, SETTINGS, None)[0].labels
