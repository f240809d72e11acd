"""A target's record and choice on disk: they carry on across a restart, a record made for another
target starts again, and a damaged file or entry is named in the log and costs only itself."""

from __future__ import annotations

import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from autoscaler.app.restoring import restore_saved
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.scorecard.figures import parse_fraction_target
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.simulation.replay import replay_levels
from autoscaler.targets import target_store
from autoscaler.targets.plans import RefreshSettings
from autoscaler.targets.service_levels import ReplayRequest
from autoscaler.targets.shift_watch import ShiftWatch
from autoscaler.targets.target_levels import CANDIDATE_LEVELS, FIRST_LEVEL, LevelTuner
from autoscaler.targets.target_store import TunerState
from autoscaler.targets.tuners import TargetLevels
from autoscaler.targets.tuning import TuningSettings
from autoscaler.web.shared.readiness import Readiness
from tests.autoscaler.test_kubernetes_inputs import METRICS, PLANS
from tests.autoscaler.test_target_levels import DAY_MINUTES, STEP_S, _a_tuned_headroom, _surges_of

COLUMNS = 2 + len(CANDIDATE_LEVELS)
NOW_S = 1_795_000_000.0


async def _chosen(target: str = "0.3%") -> tuple[TargetLevels, LevelTuner, object, object]:
    """A day of record with surges of 12 GPUs over 40, then a choice (a buffer of 9 GPUs)."""
    plan, levels, situation, tuner = _a_tuned_headroom(target)
    demand = _surges_of(12.0, DAY_MINUTES + 1)
    for minute in range(1, DAY_MINUTES + 1):
        headroom = [30.0 + index for index in range(len(CANDIDATE_LEVELS))]
        tuner.record(situation.now.timestamp() + minute * STEP_S, demand[minute], headroom, 300.0, 0.0, [5.0e9])

    async def run(key: object, function: object, request: ReplayRequest, timeout_s: float) -> object:
        return replay_levels(request)

    await levels.tune_due(situation.now.timestamp() + 86400, run, 10.0)
    assert tuner.chosen == "buffer:9"
    return levels, tuner, plan, situation


async def test_a_target_carries_on_across_a_restart_with_its_record_and_choice(tmp_path: Path) -> None:
    levels, tuner, plan, situation = await _chosen()
    path = tmp_path / target_store.FILE_NAME
    target_store.save(path, levels.states())

    restarted = TargetLevels(replay_levels, STEP_S)
    restarted.restore(target_store.load(path, COLUMNS))
    # Saved again before any refresh claims it: nothing is lost.
    assert [state.metric for state in restarted.states()] == ["gpu_headroom"]
    served = restarted.decide(plan, "series", situation, situation.now.timestamp() + 86400)
    original = levels.decide(plan, "series", situation, situation.now.timestamp() + 86400)
    assert served is not None and original is not None
    assert (served.value, served.explanation) == (original.value, original.explanation)
    again = restarted._tuners[("gpu_headroom", "series")]
    assert (again.chosen, again.asked, again.chosen_at, again.reason) == (
        tuner.chosen, tuner.asked, tuner.chosen_at, tuner.reason
    )  # fmt: skip
    assert again._window_starts == {5.0e9}
    assert not again.due(situation.now.timestamp() + 86400 + 3600)  # the daily cadence carries on
    # The next choice replays the whole record (the candidates' ledgers are not saved): the same
    # record, to the bit, as the tuner that never restarted.
    request = again.replay_request()
    assert request.start_s == situation.now.timestamp()
    assert np.array_equal(again._record.times(), tuner._record.times())
    assert np.array_equal(again._record.rows(), tuner._record.rows())
    saved = json.loads(path.read_text())
    assert saved["version"] == 1 and len(saved["tuners"]) == 1
    assert saved["tuners"][0]["series"] == "series" and saved["tuners"][0]["columns"] == COLUMNS


async def test_a_record_made_for_another_target_starts_again(tmp_path: Path) -> None:
    levels, _, plan, situation = await _chosen("0.3%")
    path = tmp_path / target_store.FILE_NAME
    target_store.save(path, levels.states())
    restarted = TargetLevels(replay_levels, STEP_S)
    restarted.restore(target_store.load(path, COLUMNS))
    stricter = replace(plan, target=parse_fraction_target("0.1%"))
    restarted.decide(stricter, "series", situation, situation.now.timestamp() + 86400)
    tuner = restarted._tuners[("gpu_headroom", "series")]
    assert tuner.level == FIRST_LEVEL and tuner.chosen_at is None
    assert "no choice yet" in tuner.reason
    # A series this replica stops serving takes its saved record with it.
    other = TargetLevels(replay_levels, STEP_S)
    other.restore(target_store.load(path, COLUMNS))
    other.forget("series")
    assert other.states() == []


async def test_a_damaged_file_or_entry_is_named_and_costs_only_itself(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    levels, _, _, _ = await _chosen()
    path = tmp_path / target_store.FILE_NAME
    target_store.save(path, levels.states())
    document = json.loads(path.read_text())
    good = document["tuners"][0]
    document["tuners"] = [
        good,
        {**good, "rows": good["rows"][:-4]},
        {**good, "columns": COLUMNS - 1},
        {**good, "target": {"kind": "nines", "value": 1}},
        {**good, "asked": "high"},
        "not an object",
        {**good, "target": {"kind": "minutes_short_fraction", "value": 1.5}},
    ]
    path.write_text(json.dumps(document))
    caplog.set_level(logging.WARNING, logger="autoscaler.targets.target_store")
    states = target_store.load(path, COLUMNS)
    assert [state.metric for state in states] == ["gpu_headroom"]
    said = [record.getMessage() for record in caplog.records if record.name == target_store.log.name]
    assert said == [
        f"{path}: dropped tuner 1: rows is not a whole number of float64 values; its record starts again",
        f"{path}: dropped tuner 2: columns is not {COLUMNS} (saved by another version's candidate levels); "
        "its record starts again",
        f"{path}: dropped tuner 3: target kind 'nines' is unknown; known: minutes_short_fraction, "
        "short_gpu_minutes_per_day, window_start_delay_p95_s; its record starts again",
        f"{path}: dropped tuner 4: asked is not a finite number; its record starts again",
        f"{path}: dropped tuner 5: the entry is not a JSON object; its record starts again",
        f"{path}: dropped tuner 6: target minutes_short_fraction: 1.5 must be above 0 % and below 100 %; "
        "its record starts again",
    ]
    caplog.clear()
    path.write_text("{not json")
    assert target_store.load(path, COLUMNS) == []
    ignored = next(record for record in caplog.records if record.name == target_store.log.name)
    assert ignored.getMessage().startswith(f"targets: ignoring {path} (every target's record starts again)")
    caplog.clear()
    path.write_text(json.dumps({**document, "tuners": {"gpu_headroom": good}}))
    assert target_store.load(path, COLUMNS) == []
    ignored = next(record for record in caplog.records if record.name == target_store.log.name)
    assert ignored.getMessage() == (
        f"targets: ignoring {path} (every target's record starts again): 'tuners' is not a list"
    )
    assert target_store.load(tmp_path / "absent.json", COLUMNS) == []


def test_the_minutes_of_an_outage_are_not_judged() -> None:
    """12 hours of record, 6 hours down (a restart after an outage), 12 hours more: the replay carries
    the last values over the gap, but its minutes past 5 missed refreshes judge no candidate."""
    tuner = LevelTuner(parse_fraction_target("1%"), TuningSettings(), gpus_per_node=8, step_s=STEP_S)
    start = 1_700_000_000.0
    headroom = [30.0 + index for index in range(len(CANDIDATE_LEVELS))]
    recorded = [*range(720), *range(1080, 1800)]
    for minute in recorded:
        tuner.record(start + minute * STEP_S, 40.0 + minute % 7, headroom, 300.0)
    request = tuner.replay_request()
    assert len(request.requested) == 1800  # the grid spans the gap
    tuner.take(start + 1800 * STEP_S, replay_levels(request), request)
    judged = (tuner._ledgers["0.95"].starts - start) / STEP_S
    assert np.array_equal(judged, [*range(725), *range(1080, 1800)])
    assert all(np.array_equal(ledger.starts, tuner._ledgers["0.95"].starts) for ledger in tuner._ledgers.values())


def test_a_choice_alone_is_saved_and_read_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A choice restored from the GPUForecast objects, saved before any refresh claimed it: no record,
    and read back as it was, without an error."""
    choice = TunerState(
        "gpu_headroom", ("gpus", (("pool", "earth"),)), parse_fraction_target("1%"), 0, 0.0, "buffer:24", 0.01,
        1.7e9, "chosen by replaying", 0.0, False, (), (), (),
    )  # fmt: skip
    levels = TargetLevels(replay_levels, STEP_S)
    levels.restore([choice])
    path = tmp_path / target_store.FILE_NAME
    target_store.save(path, levels.states())
    caplog.set_level(logging.ERROR, logger=target_store.log.name)
    assert target_store.load(path, COLUMNS) == [choice]
    assert [record for record in caplog.records if record.name == target_store.log.name] == []


def test_a_level_shift_is_saved_and_a_file_from_before_it_reads_as_none(tmp_path: Path) -> None:
    shifted = TunerState(
        "gpu_headroom", "a100", parse_fraction_target("1%"), 0, 0.0, "buffer:24", 0.01, 1.7e9, "chosen", 0.0,
        False, (), (), (), ShiftWatch(1.69e9, 1.69e9, 2, ((1.69e9, True), (1.6901e9, False)), "run"),
    )  # fmt: skip
    path = tmp_path / target_store.FILE_NAME
    target_store.save(path, [shifted])
    assert target_store.load(path, COLUMNS) == [shifted]
    document = json.loads(path.read_text())
    assert document["tuners"][0]["shift"] == {
        "judged_from": 1.69e9,
        "burning_since": 1.69e9,
        "burning_periods": 2,
        "recent": [[1.69e9, True], [1.6901e9, False]],
        "cause": "run",
    }
    older = json.loads(path.read_text())
    for field in ("recent", "cause"):  # as saved before the drift rule
        del older["tuners"][0]["shift"][field]
    path.write_text(json.dumps(older))
    assert target_store.load(path, COLUMNS) == [replace(shifted, shift=ShiftWatch(1.69e9, 1.69e9, 2))]
    for damage in ({"recent": [[1.69e9, "yes"]]}, {"recent": "none"}, {"cause": "luck"}):
        damaged = json.loads(json.dumps(document))
        damaged["tuners"][0]["shift"].update(damage)
        path.write_text(json.dumps(damaged))
        assert target_store.load(path, COLUMNS) == [], damage
    del document["tuners"][0]["shift"]  # as saved before level shifts were watched
    path.write_text(json.dumps(document))
    assert target_store.load(path, COLUMNS) == [replace(shifted, shift=ShiftWatch())]
    document["tuners"][0]["shift"] = {"judged_from": None, "burning_since": None, "burning_periods": -1}
    path.write_text(json.dumps(document))
    assert target_store.load(path, COLUMNS) == []  # named in the log, as every damaged entry is


FUTURE_S = 4_070_908_800.0  # 2099-01-01


def a_choice(chosen_at: float, series: str = "a100", shift: ShiftWatch | None = None) -> TunerState:
    return TunerState(
        "gpu_headroom", series, parse_fraction_target("1%"), 0, 0.0, "buffer:24", 0.01, chosen_at, "chosen", 0.0,
        False, (), (), (), shift or ShiftWatch(),
    )  # fmt: skip


def test_a_choice_made_in_2099_is_dropped_at_start_naming_the_file_and_the_field(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Restored by the service's own restore: kept, it would be served as chosen in 2099 and never made
    again before then."""
    target_store.save(tmp_path / target_store.FILE_NAME, [a_choice(1.7e9), a_choice(FUTURE_S, "h100")])
    pipeline = Pipeline(
        metrics=METRICS, plans=PLANS, sources=(),
        refresh=RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=5)),
    )  # fmt: skip
    caplog.set_level(logging.WARNING, logger=target_store.log.name)
    with ThreadPoolExecutor(max_workers=1) as pool:
        refresher = Refresher(provider=SnapshotProvider(empty_snapshot(METRICS)), inputs=pipeline,
                              pools=ForecastPools([pool]))  # fmt: skip
        restore_saved(refresher, Readiness(), pipeline, tmp_path)
    assert [state.series for state in refresher.levels.states()] == ["a100"]
    said = [record.getMessage() for record in caplog.records if record.name == target_store.log.name]
    assert len(said) == 1
    assert re.fullmatch(
        rf"{re.escape(str(tmp_path / target_store.FILE_NAME))}: dropped tuner 1: chosen_at 4070908800 "
        r"\(2099-01-01T00:00:00Z\) is \d+ s in the future \(a clock ahead when it was saved\?\); at most 60 s of "
        "skew is accepted; its record starts again",
        said[0],
    ), said


@pytest.mark.parametrize(
    ("state", "field"),
    [
        (a_choice(NOW_S + 61), "chosen_at"),
        (a_choice(NOW_S, shift=ShiftWatch(NOW_S + 61, None, 0)), "shift.judged_from"),
        (a_choice(NOW_S, shift=ShiftWatch(NOW_S, NOW_S + 61, 1)), "shift.burning_since"),
        (a_choice(NOW_S, shift=ShiftWatch(NOW_S, None, 0, ((NOW_S + 61, True),))), "shift.recent"),
    ],
    ids=["chosen_at", "judged_from", "burning_since", "recent"],
)
def test_every_time_of_an_entry_is_checked_and_60_s_of_skew_is_accepted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, state: TunerState, field: str
) -> None:
    path = tmp_path / target_store.FILE_NAME
    target_store.save(path, [a_choice(NOW_S + 60, "within the skew"), state])
    assert [kept.series for kept in target_store.load(path, COLUMNS, now_s=NOW_S)] == ["within the skew"]
    assert f"dropped tuner 1: {field} {NOW_S + 61:.0f} (" in caplog.text and "61 s in the future" in caplog.text


async def test_a_record_whose_last_minute_is_in_the_future_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    levels, _, _, _ = await _chosen()
    (state,) = levels.states()
    path = tmp_path / target_store.FILE_NAME
    target_store.save(path, [replace(state, chosen_at=state.times[0])])  # the record alone is ahead
    last_s = state.times[-1]
    assert target_store.load(path, COLUMNS, now_s=last_s) != []
    assert target_store.load(path, COLUMNS, now_s=last_s - 61) == []
    assert "dropped tuner 0: times " in caplog.text and "61 s in the future" in caplog.text
