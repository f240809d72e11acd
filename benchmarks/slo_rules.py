"""Variants of the walk-forward choice of ``auto-slo``, judged on the same candidates: how sensitive
attainment and cost are to the rule (the candidates, the margin a forecast must beat the buffers by,
the window, calibration).

    PYTHONPATH=. .venv/bin/python -m benchmarks.slo_rules --out /tmp/slo-rules [--traces helios,alibaba,dlrm,genai]

For each trace (as ``benchmarks/slo_attainment.py`` runs it), ``simulate`` runs ``auto-slo:T`` and
the tuned buffers at T = 1 % and 0.3 %, and the candidates' minute ledgers are kept (a pickle in
``--out``, reused when present). Each variant then chooses walk-forward among the 11 levels and the
``scheduled_buffer:N`` grid (and, where windows are declared, the ``static_buffer:N`` grid: "without
windows"), and its figures are read from the chosen candidates' ledgers, period by period
(*stitched*: the transitions between candidates are not simulated, so figures differ from a full
run by about 0.1 %; ``slo_attainment`` gives the full runs). Prints a Markdown table: share of
minutes short / provisioned GPU-hours per variant.
"""

from __future__ import annotations

import argparse
import contextlib
import pickle
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import autoscaler.simulation.runner as runner
from autoscaler.scorecard.figures import MinuteLedger, ServiceTarget
from autoscaler.targets.service_levels import Choice, Chooser, LedgerPrefix, prefixes_of, walk_forward
from autoscaler.targets.tuning import TuningSettings
from benchmarks.slo_attainment import simulate_arguments


def capture(name: str, out: Path) -> list[tuple[Any, ...]]:
    """Every walk_forward call of one simulate run: (candidate ledgers, target, arguments)."""
    path = out / f"{name}.candidates.pickle"
    if path.exists():
        with path.open("rb") as file:
            return list(pickle.load(file))  # noqa: S301 - this script's own file, written below
    calls: list[tuple[Any, ...]] = []
    original = walk_forward  # the object the runner imported, through tuning

    def recording(candidates: Mapping[str, MinuteLedger], target: ServiceTarget, *args: Any, **kwargs: Any) -> Any:
        calls.append((dict(candidates), target, args, kwargs))
        return original(candidates, target, *args, **kwargs)

    from autoscaler.commands.cli import main

    policies = "auto-slo:1%,scheduled_buffer@1%,auto-slo:0.3%,scheduled_buffer@0.3%"
    # The one run's choices, recorded (the runner looks the name up in its module at each call).
    with (
        mock.patch.object(runner, "walk_forward", recording),
        (out / f"{name}.simulate.json").open("w") as report,
        contextlib.redirect_stdout(report),
    ):
        main.main(args=simulate_arguments(name, out, policies), standalone_mode=False)
    with path.open("wb") as written:
        pickle.dump(calls, written)
    return calls


def stitched(prefixes: Mapping[str, LedgerPrefix], choices: list[Choice]) -> tuple[float, float]:
    short = scored = held = 0.0
    for choice in choices:
        figures, period_held = prefixes[choice.candidate].window(choice.start_s, choice.end_s)
        short, scored, held = short + figures.minutes_short, scored + figures.minutes_scored, held + period_held
    return short / scored, held / 3600


FAMILIES = {
    "levels": ("auto:",),
    "buffers": ("scheduled_buffer:",),
    "plain": ("static_buffer:",),
    "both": ("auto:", "scheduled_buffer:"),
    "all": ("auto:", "scheduled_buffer:", "static_buffer:"),
}


def variants() -> list[tuple[str, str, TuningSettings, bool, Chooser | None]]:
    """(name, candidate families, tuning, calibrate, chooser)."""
    plain = TuningSettings(forecast_margin=0.0)
    out: list[tuple[str, str, TuningSettings, bool, Chooser | None]] = [
        ("levels, buffers with and without windows, margin 2 % (adopted)", "all", TuningSettings(), False, None),
        ("levels and buffers with windows, no margin (before)", "both", plain, False, None),
        ("levels only, 7 d", "levels", plain, False, None),
        ("buffers only, 7 d (scheduled_buffer@)", "buffers", plain, False, None),
        ("buffers without windows only, 7 d (static_buffer@; declared windows only)", "plain", plain, False, None),
    ]
    out += [
        (
            f"levels and buffers with windows, margin {margin:.1%}",
            "both",
            TuningSettings(forecast_margin=margin),
            False,
            None,
        )
        for margin in (0.01, 0.02, 0.05)
    ]
    out += [
        (
            f"levels, buffers with and without windows, margin {margin:.1%}",
            "all",
            TuningSettings(forecast_margin=margin),
            False,
            None,
        )
        for margin in (0.0, 0.005, 0.01, 0.05)
    ]
    out += [
        (f"no margin, {days} d", "both", replace(plain, window_s=days * 86400.0), False, None) for days in (5, 10, 14)
    ]
    out += [
        (f"no margin, gain {gain:g}", "both", replace(plain, gain=gain, floor=0.5), True, None) for gain in (0.5, 1, 2)
    ]
    return out


def evaluate(calls: list[tuple[Any, ...]]) -> dict[tuple[str, float], dict[str, str]]:
    """Per (trace target) the figures of every variant."""
    by_target: dict[float, dict[str, MinuteLedger]] = {}
    arguments: dict[float, tuple[ServiceTarget, tuple[Any, ...], dict[str, Any]]] = {}
    for candidates, target, args, kwargs in calls:
        by_target.setdefault(target.value, {}).update(candidates)
        arguments[target.value] = (target, args, kwargs)
    rows: dict[tuple[str, float], dict[str, str]] = {}
    for value, ledgers in by_target.items():
        target, args, kwargs = arguments[value]
        prefixes = prefixes_of(ledgers)
        for name, families, tuning, calibrate, chooser in variants():
            texts = [text for text in ledgers if text.startswith(FAMILIES[families])]
            if not texts:  # no windows declared: no buffers without them either
                continue
            start_s, end_s, _ = args
            choices = walk_forward(
                {text: ledgers[text] for text in texts},
                target,
                start_s,
                end_s,
                tuning,
                calibrate=calibrate,
                history_from_s=kwargs["history_from_s"],
                forecasts=[text for text in texts if text.startswith("auto:")],
                chooser=chooser,
            )
            short, held = stitched(prefixes, choices)
            rows.setdefault((name, value), {})["figures"] = f"{short:.3%} / {held:,.0f}"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--traces", default="helios,alibaba,dlrm,genai")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    traces = args.traces.split(",")
    table: dict[str, dict[str, str]] = {}
    for name in traces:
        print(f"{name}: capturing the candidates", file=sys.stderr)
        for (variant, value), cells in evaluate(capture(name, args.out)).items():
            table.setdefault(variant, {})[f"{name} {value:.1%}"] = cells["figures"]
    columns = [f"{name} {value:.1%}" for name in traces for value in (0.01, 0.003)]
    print("| variant | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for variant, cells in table.items():
        print(f"| {variant} | " + " | ".join(cells.get(column, "-") for column in columns) + " |")


if __name__ == "__main__":
    main()
