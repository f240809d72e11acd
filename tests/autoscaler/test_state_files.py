"""What every state file's restore shares (``autoscaler.state_files``), on real files: one clock-skew
rule for saved times, each dropped entry named (throttled, then counted), and durable writes (a
process killed with SIGKILL mid-write leaves the old file or the new one, its temporary file is
removed at the next start; a write that fails midway leaves the old file and no temporary file).
The scorecard's and the DRA record's restores, at start, against times in the future."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.state_files import CLOCK_SKEW_S, Dropped, not_in_the_future, remove_stale_temporaries
from tests.autoscaler.test_claimed_demand import source
from tests.autoscaler.test_scorecard_collection import MINUTE, NOW, Capacity, scorecard

FUTURE_S = 4_070_908_800.0  # 2099-01-01T00:00:00Z
ROOT = Path(__file__).resolve().parents[2]


def test_a_saved_time_60_s_ahead_is_kept_and_61_s_ahead_is_refused_naming_the_field() -> None:
    assert CLOCK_SKEW_S == 60.0
    assert not_in_the_future(1_795_000_060.0, 1_795_000_000.0, "chosen_at") == 1_795_000_060.0
    with pytest.raises(ValueError, match="future") as refused:
        not_in_the_future(1_795_000_061.0, 1_795_000_000.0, "chosen_at")
    assert str(refused.value) == (
        "chosen_at 1795000061 (2026-11-18T11:07:41Z) is 61 s in the future (a clock ahead when it was saved?); "
        "at most 60 s of skew is accepted"
    )
    with pytest.raises(ValueError, match=r"^at 1e\+300 is"):  # beyond what a datetime holds: still named
        not_in_the_future(1e300, 0.0, "at")


def test_dropped_entries_are_named_10_lines_at_a_time_and_the_rest_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "some.json"
    dropped = Dropped(path, logging.getLogger("test.dropped"), "it starts again")
    with caplog.at_level(logging.WARNING, logger="test.dropped"):
        for index in range(25):
            dropped.drop(f"entry {index}", "x" * (10_000 if index == 0 else 1))
        dropped.done()
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 11
    assert lines[0] == f"{path}: dropped entry 0: {'x' * 512}... (10000 characters); it starts again"
    assert lines[9] == f"{path}: dropped entry 9: x; it starts again"
    assert lines[10] == f"{path}: dropped 25 entries in all, 15 of them not named above (at most 10 lines per 10 s)"


def test_only_temporary_files_of_state_file_writes_are_removed(tmp_path: Path) -> None:
    ours = [".targets.json.k3j_a9x2.tmp", ".claimed_demand-gpus_requested.json.0123abcd.tmp", "scorecard.json.tmp"]
    others = ["notes.tmp", ".hidden.tmp", "ca.crt", "targets.json", ".targets.json.toolongname.tmp", "x.json.tmp.1"]
    for name in ours + others:
        (tmp_path / name).write_text("{}")
    (tmp_path / ".served-values.json.abcdefgh.tmp").mkdir()  # not a file: left alone
    assert sorted(path.name for path in remove_stale_temporaries(tmp_path)) == sorted(ours)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*others, ".served-values.json.abcdefgh.tmp"])
    assert remove_stale_temporaries(tmp_path / "absent") == []


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from autoscaler.state_files import write_atomically

    path = Path(sys.argv[1])
    rows = "x" * (32 << 20)  # 32 MiB of JSON: each write takes a while
    for count in range(1, 1_000_000):
        write_atomically(path, {"version": 1, "count": count, "rows": rows})
        print(count, flush=True)
    """
)


def killed_mid_write(path: Path) -> tuple[int, list[Path]]:
    """A process rewriting ``path`` killed with SIGKILL once its first write is done and a second one's
    temporary file has appeared: what it had written, and the temporary files left."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", WRITER, str(path)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment, cwd=ROOT) as writer:
        assert writer.stdout is not None
        try:
            assert writer.stdout.readline().strip() == "1"  # one whole write done: the old file exists
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(e.name.endswith(".tmp") for e in os.scandir(path.parent)):
                time.sleep(0.001)
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=10)
        written = max(int(line) for line in ["1", *writer.stdout.read().split()])
    return written, [entry for entry in path.parent.iterdir() if entry != path]


def test_a_writer_killed_with_sigkill_leaves_a_whole_file_and_its_temporary_is_removed_at_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.json"
    written, left = killed_mid_write(path)
    assert json.loads(path.read_text())["count"] in (written, written + 1)  # a whole document, never half
    assert len(left) == 1 and re.fullmatch(r"\.state\.json\.[a-z0-9_]{8}\.tmp", left[0].name), left
    assert remove_stale_temporaries(tmp_path) == left
    assert [entry.name for entry in tmp_path.iterdir()] == ["state.json"]


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """The file size limit (RLIMIT_FSIZE) makes the second, larger write fail after its first MiB."""
    path = tmp_path / "state.json"
    script = textwrap.dedent(
        """
        import resource, signal, sys
        from pathlib import Path
        from autoscaler.state_files import write_atomically

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        path = Path(sys.argv[1])
        write_atomically(path, {"version": 1, "count": 1})
        try:
            write_atomically(path, {"version": 1, "count": 2, "rows": list(range(1_000_000))})
        except OSError as error:
            print("failed:", error.strerror)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
    )  # fmt: skip
    assert done.stdout.strip() == "failed: File too large", done.stderr
    assert json.loads(path.read_text()) == {"version": 1, "count": 1}
    assert [entry.name for entry in tmp_path.iterdir()] == ["state.json"]


async def test_a_scorecard_saved_with_a_sample_in_2099_carries_on_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Restored as the service restores it at start: the rows and the last sample from the future are
    dropped, each list named once; kept, every new sample was refused as older, for good."""
    path = tmp_path / "scorecard.json"
    capacity = Capacity({"a100": 8.0}, {"a100": 8.0})
    card = scorecard({"a100": 2.0}, capacity, path)
    for minute in range(3):
        await card.collect(NOW + minute * MINUTE)
    card.save(card.document())
    document = json.loads(path.read_text())
    pool = document["pools"]["a100"]
    pool["last_sample"][0] = FUTURE_S
    pool["minutes"] = {name: [*column, column[-1]] for name, column in pool["minutes"].items()}
    pool["minutes"]["start"][-1] = FUTURE_S
    pool["waits"] = {"at": [NOW.timestamp(), FUTURE_S, FUTURE_S], "seconds": [30.0, 60.0, 90.0]}
    pool["queue_capacity_waits"] = {"at": [FUTURE_S, NOW.timestamp()], "seconds": [510.0, 120.0]}
    path.write_text(json.dumps(document))

    restored = scorecard({"a100": 2.0}, capacity, path)
    with caplog.at_level(logging.WARNING):
        restored.restore(now_s=(NOW + 3 * MINUTE).timestamp())
    said = [record.getMessage() for record in caplog.records if "dropped" in record.getMessage()]
    ahead = r"\(2099-01-01T00:00:00Z\) is \d+ s in the future \(a clock ahead when it was saved\?\); at most 60 s"
    expected = [
        rf"dropped pool a100: last sample: last_sample\.at 4070908800 {ahead}",
        rf"dropped pool a100: 1 rows of minutes: minutes\.start 4070908800 {ahead}",
        rf"dropped pool a100: 2 rows of waits: waits\.at 4070908800 {ahead}",
        rf"dropped pool a100: 1 rows of queue_capacity_waits: queue_capacity_waits\.at 4070908800 {ahead}",
    ]
    assert len(said) == len(expected), said
    for line, pattern in zip(said, expected, strict=True):
        assert line.startswith(f"{path}: ") and re.search(pattern, line), line
    a100 = restored.cards["a100"]
    assert a100.last_sample is None and list(a100.waits) == [(NOW.timestamp(), 30.0)]
    assert list(a100.queue.events["capacity"]) == [(NOW.timestamp(), 120.0)]
    scored = a100.totals.minutes_scored
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        for minute in (3, 4):
            await restored.collect(NOW + minute * MINUTE)
    assert "older than the last one" not in caplog.text
    assert a100.totals.minutes_scored == scored + 1


async def test_dra_claims_recorded_in_2099_are_dropped_when_the_source_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "claimed_demand-gpus_requested.json"
    past_s = int((datetime.now(UTC) - timedelta(hours=1)).timestamp()) // 60 * 60
    pools = {"a100": {"at": [past_s, int(FUTURE_S)], "gpus": [2, 3]}, "h100": {"at": [int(FUTURE_S)], "gpus": [1]}}
    path.write_text(json.dumps({"version": 1, "signal": "gpus_requested", "pools": pools}))
    with caplog.at_level(logging.WARNING):
        restored = source({}, path, {"nodepool": "a100"})
    assert restored.recorded == {"a100": {past_s: 2.0}}
    said = [record.getMessage() for record in caplog.records]
    assert [line.split(": at ")[0] for line in said] == [
        f"{path}: dropped pool a100 point 4070908800",
        f"{path}: dropped pool h100 point 4070908800",
    ]
    assert all("s in the future (a clock ahead when it was saved?)" in line for line in said)
