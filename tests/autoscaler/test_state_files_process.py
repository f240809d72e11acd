"""Issue 38's state-file cases against the running demo: at start it removes the temporary files a
killed write left (only those of its own naming), and its restores drop, naming the file, the entry
and the field, a target's choice made in 2099, a scorecard's last sample in 2099 and a saved value
of the wrong type."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from autoscaler.refresh.demo import POOL
from autoscaler.scorecard import store as scorecard_store
from autoscaler.scorecard.figures import parse_fraction_target
from autoscaler.scorecard.pools import PoolScorecard
from autoscaler.serving import persistence
from autoscaler.targets import target_store
from autoscaler.targets.target_store import TunerState
from tests.autoscaler.demo_process import DemoProcess

FUTURE_S = 4_070_908_800.0  # 2099-01-01T00:00:00Z
AHEAD = r"\(2099-01-01T00:00:00Z\) is \d+ s in the future \(a clock ahead when it was saved\?\); at most 60 s"
STALE = [".scorecard.json.abcd1234.tmp", ".served-values.json.k3j_a9x2.tmp", "targets.json.tmp"]
NOT_OURS = ["keep.tmp", ".notes.tmp"]


def write_state(state: Path) -> None:
    now_s = time.time()
    choice = TunerState(
        "gpu_headroom", "demo", parse_fraction_target("1%"), 0, 0.0, "buffer:24", 0.01, FUTURE_S, "chosen", 0.0,
        False, (), (), (),
    )  # fmt: skip
    target_store.save(state / target_store.FILE_NAME, [choice])
    card = PoolScorecard()
    for minutes_ago in (3, 2, 1):
        card.sample(now_s - 60 * minutes_ago, 0.0, 8.0, 4.0)
    pool = card.document()
    pool["last_sample"][0] = FUTURE_S
    scorecard_store.save(state / scorecard_store.FILE_NAME, {"pools": {POOL: pool}, "pods": {}})
    at = datetime.fromtimestamp(now_s - 60, UTC).isoformat()
    good = {"metric": "gpu_headroom", "labels": {"nodepool": POOL}, "value": 2, "timestamp": at}
    document = {"version": 1, "created_at": at, "series": [good, {**good, "namespace": 5}]}
    (state / persistence.FILE_NAME).write_text(json.dumps(document))
    for name in STALE + NOT_OURS:
        (state / name).write_text('{"half": ')


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoProcess]:
    state = tmp_path_factory.mktemp("state-files") / "state"
    state.mkdir()
    write_state(state)
    process = DemoProcess(state)
    process.start()
    yield process
    assert process.stop() == 0


def test_stale_temporary_files_of_our_naming_are_removed_at_start_and_others_kept(demo: DemoProcess) -> None:
    for name in STALE:
        assert not (demo.state / name).exists()
        assert re.search(rf"removed {re.escape(str(demo.state / name))}, a temporary file", demo.start_log)
    assert all((demo.state / name).exists() for name in NOT_OURS)


async def test_a_choice_made_in_2099_is_dropped_naming_the_file_and_the_field(demo: DemoProcess) -> None:
    path = re.escape(str(demo.state / target_store.FILE_NAME))
    await demo.wait_for_log(rf"{path}: dropped tuner 0: chosen_at 4070908800 {AHEAD}.*its record starts again")


async def test_a_scorecard_sample_in_2099_is_dropped_naming_the_file_and_the_field(demo: DemoProcess) -> None:
    path = re.escape(str(demo.state / scorecard_store.FILE_NAME))
    await demo.wait_for_log(rf"{path}: dropped pool {POOL}: last sample: last_sample\.at 4070908800 {AHEAD}")


async def test_a_saved_value_of_the_wrong_type_is_dropped_naming_the_file_and_the_field(demo: DemoProcess) -> None:
    path = re.escape(str(demo.state / persistence.FILE_NAME))
    await demo.wait_for_log(rf"{path}: dropped saved value 1: TypeError: namespace 5 is not a string")
