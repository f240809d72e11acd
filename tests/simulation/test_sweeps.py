"""Which settings a sweep tries, and where it stops: at the first past the costliest ``auto``."""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.simulation.engine import Outcome
from autoscaler.simulation.policies import parse_policy
from autoscaler.simulation.sweeps import rolling_max_settings, static_buffer_settings, sweep_until_past
from tests.simulation.fakes import outcome

HOUR = 3600.0


def test_rolling_max_windows_go_in_five_minutes_up_to_the_first_covering_the_trace():
    assert rolling_max_settings(HOUR) == [f"reactive_max:{minutes}m" for minutes in range(5, 65, 5)]
    assert rolling_max_settings(HOUR + 1)[-1] == "reactive_max:65m"  # a whole trace, not one second less
    assert rolling_max_settings(60.0) == ["reactive_max:5m"]
    assert [parse_policy(text).window_s for text in rolling_max_settings(900.0)] == [300.0, 600.0, 900.0]


def test_static_buffers_go_one_gpu_at_a_time_up_to_the_limit_held_plus_a_node():
    # 100 GPU-hours over 10 scored hours is 10 GPUs held; a buffer past 10 + 8 need never run.
    assert static_buffer_settings(100 * HOUR, 10 * HOUR, 8) == [f"static_buffer:{gpus}" for gpus in range(19)]


class _Runs:
    """Each setting's GPU-hours from a table; records the batches asked for."""

    def __init__(self, hours: dict[str, float]) -> None:
        self.hours = hours
        self.batches: list[list[str]] = []

    def __call__(self, texts: Sequence[str]) -> dict[str, Outcome]:
        self.batches.append(list(texts))
        return {text: outcome(self.hours[text]) for text in texts}


SETTINGS = [f"reactive_max:{minutes}m" for minutes in range(5, 55, 5)]


def _swept_hours(runs: _Runs, limit_hours: float, batch_size: int) -> dict[str, float]:
    swept = sweep_until_past(SETTINGS, runs, limit_hours * HOUR, batch_size)
    return {text: result.totals.provisioned / HOUR for text, result in swept.items()}


def test_sweep_stops_after_the_batch_holding_the_first_setting_past_the_limit():
    runs = _Runs({text: 100.0 + 2 * index for index, text in enumerate(SETTINGS)})  # 100, 102, ... 118
    swept = _swept_hours(runs, 107.0, batch_size=2)
    # 25m (108) is the first past 107: its batch ran whole (30m too), but the sweep keeps up to 25m.
    assert swept == {"reactive_max:5m": 100, "reactive_max:10m": 102, "reactive_max:15m": 104,
                     "reactive_max:20m": 106, "reactive_max:25m": 108}  # fmt: skip
    assert runs.batches == [SETTINGS[0:2], SETTINGS[2:4], SETTINGS[4:6]]
    # At the limit is not past it: a setting costing exactly what auto costs is kept and the sweep goes on.
    assert list(_swept_hours(_Runs(runs.hours), 110.0, batch_size=1)) == SETTINGS[:7]


def test_sweep_keeps_the_first_past_the_limit_even_when_a_later_one_in_its_batch_is_cheaper():
    hours = dict.fromkeys(SETTINGS, 100.0) | {"reactive_max:15m": 130.0, "reactive_max:20m": 105.0}
    swept = _swept_hours(_Runs(hours), 110.0, batch_size=4)
    assert list(swept) == SETTINGS[:3]


def test_sweep_runs_every_setting_when_none_passes_the_limit_and_one_when_the_first_does():
    cheap = _Runs(dict.fromkeys(SETTINGS, 50.0))
    assert list(_swept_hours(cheap, 110.0, batch_size=3)) == SETTINGS
    assert [len(batch) for batch in cheap.batches] == [3, 3, 3, 1]
    costly = _Runs(dict.fromkeys(SETTINGS, 500.0))
    assert list(_swept_hours(costly, 110.0, batch_size=2)) == SETTINGS[:1]
    assert costly.batches == [SETTINGS[:2]]
