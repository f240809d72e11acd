"""A target's replay runs the pool its NodeClaims taught (issue #36, item 2): the learned lead times
(retries included) and the share of failed launches; until they taught anything, the lead time
served. The explanation says which."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from autoscaler import policy
from autoscaler.scorecard.figures import MinuteLedger, parse_fraction_target, short_figures
from autoscaler.simulation.pool_set import PoolSetConfig
from autoscaler.simulation.replay import replay_levels, replayed_pool
from autoscaler.targets.launches import LEAD_TIME_POINTS, LearnedLaunches, alike, learned_launches
from autoscaler.targets.plans import MetricPlan
from autoscaler.targets.service_levels import ReplayRequest
from autoscaler.targets.target_levels import CANDIDATE_LEVELS, LevelTuner
from autoscaler.targets.tuners import TargetLevels
from autoscaler.targets.tuning import TuningSettings
from tests.autoscaler.test_target_levels import _forecast

STEP_S = 60.0
DAY_MINUTES = 1440
RISES = 24  # one a quarter of an hour in every 3 hours of three days


def _rises(every_minutes: int = 180) -> np.ndarray:
    """40 GPUs, rising to 56 for an hour every 3 hours (by default), over three days."""
    requested = np.full(3 * DAY_MINUTES, 40.0)
    for start in range(60, len(requested), every_minutes):
        requested[start : start + 60] = 56.0
    return requested


def _replayed(lead_time_s: float, launches: LearnedLaunches | None, buffer: float = 8.0) -> MinuteLedger:
    requested = _rises()
    request = ReplayRequest(STEP_S, requested, {"buffer": np.full(len(requested), buffer)}, lead_time_s, 8)
    if launches is not None:
        request = ReplayRequest(**{**request.__dict__, "launches": launches})
    return replay_levels(request)["buffer"]


def test_a_pool_that_launches_in_9_minutes_is_short_for_more_minutes_for_the_same_buffer() -> None:
    configured = short_figures(_replayed(300.0, None))
    nine = learned_launches([540.0] * 5, failed=0, ready=5)
    learned = short_figures(_replayed(300.0, nine))
    # 8 of the 16 GPUs of each rise are short (the buffer holds 8) from the rise until the node
    # launched at the 1 s batch is Ready: 301 s at the configured 5 minutes, 541 s at the learned 9.
    assert configured.short_gpu_minutes == pytest.approx(RISES * 8 * 301 / 60)
    assert learned.short_gpu_minutes == pytest.approx(RISES * 8 * 541 / 60)
    assert (configured.minutes_short, learned.minutes_short) == (RISES * 6, RISES * 10)
    # A spread of learned lead times (p50 9m) replays between them, and the same request the same way.
    spread = learned_launches([480.0, 510.0, 530.0, 540.0, 550.0, 570.0, 660.0], failed=0, ready=7)
    first, again = _replayed(300.0, spread), _replayed(300.0, spread)
    assert np.array_equal(first.short_gpu_seconds, again.short_gpu_seconds)
    assert configured.minutes_short < short_figures(first).minutes_short <= RISES * 12
    # A larger buffer covers the whole rise, whatever the lead time.
    assert short_figures(_replayed(300.0, nine, buffer=16.0)).minutes_short == 0


def test_failed_launches_add_short_minutes_and_their_lost_time_is_not_counted_twice() -> None:
    nine = learned_launches([540.0] * 5, failed=0, ready=5)
    failing = learned_launches([540.0] * 5, failed=5, ready=20)
    assert failing is not None and failing.failure_rate == 0.2
    pool = replayed_pool(ReplayRequest(STEP_S, np.zeros(1), {}, 300.0, 8, launches=failing))
    assert isinstance(pool, PoolSetConfig) and pool.scarcity.launch_failure_rate == 0.2
    assert pool.pools[0].distribution.values == (540.0,) * 5
    without, with_failures = short_figures(_replayed(300.0, nine)), short_figures(_replayed(300.0, failing))
    # A failed launch holds nothing and is retried by the next batch, as simulate --launch-failure-rate
    # retries it: the GPUs it was for stay short a second longer each time. The minutes a retry
    # costs in the cluster are in the learned lead times already (a need's runs from its first
    # NodeClaim), so they are not added again.
    assert with_failures.short_gpu_minutes > without.short_gpu_minutes
    assert with_failures.short_gpu_minutes < without.short_gpu_minutes + RISES * 8 * 10 / 60
    assert with_failures.minutes_short >= without.minutes_short


def test_what_the_request_carries_is_small_and_says_itself() -> None:
    samples = [540.0 + 10.0 * (index % 7) for index in range(36)] + [660.0]
    learned = learned_launches(samples, failed=2, ready=38)
    assert learned is not None
    assert len(learned.lead_times_s) == LEAD_TIME_POINTS  # not every sample
    assert (learned.lead_times_s[0], learned.lead_times_s[-1], learned.samples) == (540.0, 660.0, 37)
    assert learned.describe() == "the pool's 37 learned launches: lead time p50 9m30s, p95 10m, 5 % failed"
    assert learned_launches([], failed=3, ready=0) is None
    # Every launch failed since the process started (the lead times restored): replayed at most 90 %.
    assert learned_launches([540.0] * 3, failed=4, ready=0) == LearnedLaunches((540.0, 540.0, 540.0), 3, 0.9)
    assert alike(None, None) and not alike(None, learned)
    assert alike(learned, learned_launches([s + 20.0 for s in samples], 2, 38))
    assert not alike(learned, learned_launches([s * 1.5 for s in samples], 2, 38))
    assert not alike(learned, learned_launches(samples, 12, 28))


def _recorded_tuner() -> LevelTuner:
    target = parse_fraction_target("1%")
    tuner = LevelTuner(target, TuningSettings(), gpus_per_node=8, step_s=STEP_S, pool="a100")
    # Two rises a day: short 6 minutes each at 5 minutes (12 of the 14.4 a day 1 % allows), 10 at 9.
    demand = _rises(every_minutes=720)
    start = 1_700_000_000.0
    for minute in range(DAY_MINUTES + 1):
        tuner.record(start + minute * STEP_S, demand[minute], [0.5 * i for i in range(len(CANDIDATE_LEVELS))], 300.0)
    return tuner


def test_the_reason_says_which_pool_was_replayed_and_a_moved_one_is_replayed_whole() -> None:
    now = 1_700_000_000.0 + DAY_MINUTES * STEP_S
    tuner = _recorded_tuner()
    request = tuner.replay_request()
    assert request.launches is None and request.lead_time_s == 300.0
    tuner.take(now, replay_levels(request), request)
    assert tuner.reason.endswith(
        "; replayed with a fixed lead time of 5m (the lead time served: no launch learned yet)"
    )
    chosen_at_five, first_reason = tuner.chosen, tuner.reason
    # The pool's NodeClaims now launch in 9 minutes: the whole record is replayed on them, not only
    # the new minutes.
    tuner.pool_replayed.launches = learned_launches([540.0] * 4, failed=1, ready=4)
    again = tuner.replay_request()
    assert again.launches == tuner.pool_replayed.launches and again.start_s == request.start_s
    tuner.take(now + 60.0, replay_levels(again), again)
    assert tuner.reason.endswith("; replayed with the pool's 4 learned launches: lead time p50 9m, p95 9m, 20 % failed")
    # At 5 minutes no buffer is needed (12 minutes short of 1441); at 9 it would be 20: 9 GPUs (a
    # seventh node) hold the rise.
    assert (chosen_at_five, tuner.chosen) == ("buffer:0", "buffer:9")
    assert "with 0.83 % of minutes short" in first_reason
    # A model that did not move replays only the new minutes.
    tuner.pool_replayed.launches = learned_launches([545.0] * 4, failed=1, ready=4)
    assert tuner.replay_request().start_s > request.start_s


async def test_target_levels_ask_the_pools_launches_before_each_replay() -> None:
    asked: list[str] = []
    nine = learned_launches([540.0] * 3, failed=0, ready=3)

    def launches_of(pool: str) -> LearnedLaunches | None:
        asked.append(pool)
        return nine if pool == "a100" else None

    plan = MetricPlan(metric="gpu_headroom", signal="gpus", kind="headroom", target=parse_fraction_target("1%"))
    levels = TargetLevels(replay_levels, STEP_S)
    levels.learned_launches = launches_of
    requests: list[ReplayRequest] = []

    async def run(key: object, function, request: ReplayRequest, timeout_s: float) -> dict[str, MinuteLedger]:  # type: ignore[no-untyped-def]
        requests.append(request)
        return function(request)  # type: ignore[no-any-return]

    start = datetime(2026, 3, 2, tzinfo=UTC).timestamp()
    for pool in ("a100", "t4"):
        for minute in range(DAY_MINUTES + 1):
            now = datetime.fromtimestamp(start + minute * STEP_S, UTC)
            forecast = _forecast(now, dict.fromkeys(CANDIDATE_LEVELS, 44.0))
            lead = policy.LeadTime(policy.timedelta(minutes=5), "configured")
            situation = policy.Situation(forecast=forecast, now=now, lead_time=lead, requested_now=40.0)
            levels.decide(plan, pool, situation, now.timestamp(), pool)
    await levels.tune_due(start + DAY_MINUTES * STEP_S, run, 10.0)
    assert asked == ["a100", "t4"]
    assert [request.launches for request in requests] == [nine, None]
