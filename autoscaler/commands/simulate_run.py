"""What ``gpu-autoscaler simulate`` runs (autoscaler/commands/simulate.py defines its options): read
the trace, build the configuration, simulate, and write the report. Imported only when the command
runs, so that its ``--help`` loads none of NumPy, pandas or the settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pandas as pd
from click.core import ParameterSource

from autoscaler.commands.output import emit
from autoscaler.commands.progress import progress_bar
from autoscaler.simulation.actuation import Actuation
from autoscaler.simulation.defaults import PLACEHOLDER_GPUS, ActuationKind
from autoscaler.simulation.forecasting import ForecastCadence
from autoscaler.simulation.hpa import DEFAULT_SCALE_DOWN, HPASpec, ScalingRules, parse_tolerance
from autoscaler.simulation.inputs import (
    InputError,
    WindowSchedule,
    Workload,
    demand_workload,
    parse_schedule,
    pod_workload,
)
from autoscaler.simulation.lead_times import LeadTimeDistribution, parse_lead_time_distribution
from autoscaler.simulation.policies import PolicySpec, parse_policies
from autoscaler.simulation.pools import Scarcity, load_pools, single_pool
from autoscaler.simulation.quota import QuotaSettings
from autoscaler.simulation.report import build_report, plot, render_table
from autoscaler.simulation.runner import SimulationConfig, SimulationResult, simulate
from autoscaler.simulation.tuning import TuningSettings
from forecast.durations import parse_duration, parse_positive_duration


def _seconds(flag: str, text: str, *, allow_zero: bool = False) -> float:
    parse = parse_duration if allow_zero else parse_positive_duration
    try:
        return float(parse(text).total_seconds())
    except ValueError as error:
        raise ValueError(f"{flag}: {error}") from None


def run(
    input_path: Path | None,
    pods_path: Path | None,
    step: str,
    gpus_per_node: int,
    lead_time: str,
    lead_time_distribution: str | None,
    lead_time_margin: str,
    warmup: str,
    policies: str,
    schedules: tuple[str, ...],
    consolidate_after: str,
    gpu_hour_price: float | None,
    output_format: str,
    plot_path: Path | None,
    forecast_step: str,
    reselect_every: str,
    refit_every: str | None,
    lookback: str,
    scale_down_stabilization: str,
    hpa_tolerance: str,
    sweep_static: bool,
    sweep_rolling_max: bool,
    actuation: ActuationKind,
    buffer_chunk_gpus: int | None,
    buffer_limit_gpus: int | None,
    workers: int,
    seed: int,
    unit_pods: bool = False,
    **grouped: Any,  # the tuned policies' options (``_tuning``), the pool's capacity (``_capacity``), ``_quota``
) -> None:
    """The command with its options parsed: a usage error for bad input, else the report written."""
    try:
        source = _source(input_path, pods_path, gpus_per_node, gpu_hour_price, plot_path)
        step_s, lead_s = _seconds("--step", step), _seconds("--lead-time", lead_time)
        specs, windows = _policies(policies, sweep_static, sweep_rolling_max), _windows(schedules)
        distribution = parse_lead_time_distribution(lead_time_distribution or f"fixed:{lead_time}")
        buffer = (buffer_chunk_gpus, buffer_limit_gpus)
        actuated = _actuation(actuation, scale_down_stabilization, hpa_tolerance, buffer, gpus_per_node)
        margin_s = _seconds("--lead-time-margin", lead_time_margin, allow_zero=True)
        cadence = _cadence(forecast_step, reselect_every, refit_every, lookback, lead_s=lead_s + margin_s, seed=seed)
        _check_forecast_step(cadence, step_s, step_text=step, forecast_step_text=forecast_step)
        config = SimulationConfig(
            gpus_per_node=gpus_per_node, lead_time_s=lead_s, lead_margin_s=cadence.lead_s - lead_s,
            warmup_s=_seconds("--warmup", warmup, allow_zero=True), lead_distribution=distribution,
            consolidate_after_s=_seconds("--consolidate-after", consolidate_after, allow_zero=True),
            cadence=cadence, actuation=actuated, seed=seed, tuning=_tuning(grouped),
            quota=_quota(grouped, queued=pods_path is not None or unit_pods, windows=bool(windows)),
            **_capacity(grouped, gpus_per_node, distribution, gpu_hour_price),
        )  # fmt: skip
        workload = _workload(source, pods_path is not None, step_s, windows, gpus_per_node)
        workload = _as_unit_pods(workload, pods_path is not None, windows) if unit_pods else workload
        with progress_bar("simulating") as progress:
            result = simulate(
                workload, specs, config, workers=workers, progress=progress,
                sweep_static=sweep_static, sweep_rolling_max=sweep_rolling_max,
            )  # fmt: skip
    except (InputError, ValueError) as error:
        raise click.UsageError(str(error)) from None
    _output(result, str(source), pods_path is not None or unit_pods, gpu_hour_price, output_format, plot_path)


def _windows(schedules: tuple[str, ...]) -> tuple[WindowSchedule, ...]:
    return tuple(parse_schedule(text) for text in schedules)


def _tuning(options: dict[str, Any]) -> TuningSettings:
    """The ``--tune-*`` options."""
    every, window = options["tune_every"], options["tune_window"]
    every_s, window_s = _seconds("--tune-every", every), _seconds("--tune-window", window)
    restart_burn = float(options["tune_restart_burn"]) or None
    tuning = TuningSettings(
        every_s=every_s,
        window_s=window_s,
        gain=options["tune_gain"],
        restart_burn=restart_burn,
        restart_periods=options["tune_restart_periods"],
        drift_burn=float(options["tune_drift_burn"]) or None,
        drift_periods=options["tune_drift_periods"],
        drift_window=options["tune_drift_window"],
    )
    if tuning.window_s < tuning.every_s:
        raise ValueError(f"--tune-window ({window}) must be at least --tune-every ({every})")
    if tuning.drift_window < tuning.drift_periods:
        raise ValueError(
            f"--tune-drift-window ({tuning.drift_window}) must be at least "
            f"--tune-drift-periods ({tuning.drift_periods})"
        )
    return tuning


def _quota(options: dict[str, Any], *, queued: bool, windows: bool) -> QuotaSettings | None:
    """The ``--quota-gpus`` queue; its other flags without it are a usage error, not ignored."""
    quota_gpus: int | None = options["quota_gpus"]
    if quota_gpus is None:
        context = click.get_current_context()
        for parameter, flag in (
            ("admission_check_delay", "--admission-check-delay"),
            ("see_workloads", "--see-workloads"),
        ):
            if context.get_parameter_source(parameter) is not ParameterSource.DEFAULT:
                raise ValueError(f"{flag} is the quota queue's: it needs --quota-gpus")
        return None
    if not queued:
        raise ValueError("--quota-gpus queues pods: give --pods (a pod trace) or --unit-pods, not fluid --input demand")
    if windows:
        raise ValueError("--quota-gpus: declared windows (--schedule) are not queued; leave them out")
    delay_s = _seconds("--admission-check-delay", options["admission_check_delay"], allow_zero=True)
    return QuotaSettings(quota_gpus, delay_s, options["see_workloads"])


def _source(
    input_path: Path | None, pods_path: Path | None, gpus_per_node: int, price: float | None, plot_path: Path | None
) -> Path:
    source = pods_path or input_path
    if source is None or (input_path is not None and pods_path is not None):
        raise ValueError("give --input (a demand CSV) or --pods (a pod trace), exactly one of them")
    _check_nodes_price_and_plot(gpus_per_node, price, plot_path)
    return source


def _workload(
    source: Path, pods: bool, step_s: float, windows: tuple[WindowSchedule, ...], gpus_per_node: int
) -> Workload:
    read = pod_workload if pods else demand_workload
    return read(source, pd.Timedelta(seconds=step_s), windows, gpus_per_node)


def _as_unit_pods(workload: Workload, pods: bool, windows: tuple[WindowSchedule, ...]) -> Workload:
    """``--unit-pods``: the demand CSV's GPUs as the report replays them (one-GPU pods)."""
    from autoscaler.simulation.what_if import series_workload

    if pods:
        raise ValueError("--unit-pods replays --input (a demand CSV); a --pods trace has its pods already")
    if windows:
        raise ValueError("--unit-pods: declared windows (--schedule) are not replayed as report does; leave them out")
    series = pd.Series(workload.base, index=workload.index())
    return series_workload(workload.source, series, workload.step_s)


def _capacity(
    options: dict[str, Any], gpus_per_node: int, distribution: LeadTimeDistribution, price: float | None
) -> dict[str, Any]:
    """``pools`` and ``scarcity`` for the configuration: the pools file's, or the one pool of the flags
    when launches fail or spot nodes are reclaimed; nothing (the plain pool) otherwise."""
    pools_path: Path | None = options["pools_path"]
    scarcity = Scarcity(options["launch_failure_rate"], options["spot_interruptions"])
    if pools_path is not None:
        if price is not None:
            raise ValueError("--gpu-hour-price: with --pools each pool has its own price_per_gpu_hour")
        return {"pools": load_pools(pools_path), "scarcity": scarcity}
    if scarcity != Scarcity():
        spot = scarcity.spot_interruptions_per_node_hour > 0
        return {"pools": single_pool(gpus_per_node, distribution, spot=spot, price=price), "scarcity": scarcity}
    return {}


def _check_nodes_price_and_plot(gpus_per_node: int, gpu_hour_price: float | None, plot_path: Path | None) -> None:
    if gpus_per_node < 1:
        raise ValueError(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
    if plot_path is not None and not plot_path.parent.is_dir():
        raise ValueError(f"--plot {plot_path}: directory {plot_path.parent} does not exist")
    if gpu_hour_price is not None and not gpu_hour_price >= 0:
        raise ValueError(f"--gpu-hour-price must be a number >= 0, got {gpu_hour_price}")


def _actuation(
    kind: ActuationKind,
    stabilization: str,
    tolerance: str,
    buffer: tuple[int | None, int | None],
    gpus_per_node: int,
) -> Actuation:
    """The actuation; a flag that belongs to the other one is a usage error, not silently ignored."""
    chunk_gpus, limit_gpus = buffer
    if kind == "placeholder-hpa":
        if chunk_gpus is not None:
            raise ValueError("--buffer-chunk-gpus sizes CapacityBuffer replicas: it needs --actuation capacity-buffer")
        if limit_gpus is not None:
            raise ValueError(
                "--buffer-limit-gpus is a CapacityBuffer's spec.limits: it needs --actuation capacity-buffer"
            )
        window_s = _seconds("--scale-down-stabilization", stabilization, allow_zero=True)
        scale_down = ScalingRules(int(window_s), DEFAULT_SCALE_DOWN.policies)
        return Actuation(kind, hpa=HPASpec(tolerance=parse_tolerance(tolerance), scale_down=scale_down))
    context = click.get_current_context()
    for parameter, flag in (
        ("scale_down_stabilization", "--scale-down-stabilization"),
        ("hpa_tolerance", "--hpa-tolerance"),
    ):
        if context.get_parameter_source(parameter) is not ParameterSource.DEFAULT:
            raise ValueError(
                f"{flag} is the placeholder HPA's: --actuation capacity-buffer has no HPA "
                "(the buffer's replicas follow the served headroom directly)"
            )
    chunk = PLACEHOLDER_GPUS if chunk_gpus is None else chunk_gpus
    if not 1 <= chunk <= gpus_per_node:
        raise ValueError(f"--buffer-chunk-gpus must be from 1 to --gpus-per-node ({gpus_per_node}), got {chunk}")
    return Actuation(kind, chunk_gpus=chunk, limit_gpus=limit_gpus)


def _policies(text: str, sweep_static: bool, sweep_rolling_max: bool) -> tuple[PolicySpec, ...]:
    specs = parse_policies(text)
    if sweep_static and not any(spec.name == "auto" for spec in specs):
        raise ValueError("--sweep-static compares auto:Q policies with static buffers: give at least one auto:Q")
    if sweep_rolling_max and not any(spec.name == "auto" for spec in specs):
        raise ValueError("--sweep-rolling-max compares auto:Q with rolling maxima: give at least one auto:Q")
    return specs


def _cadence(
    forecast_step: str, reselect_every: str, refit_every: str | None, lookback: str, *, lead_s: float, seed: int
) -> ForecastCadence:
    """The forecasters' cadence; ``lead_s`` is what they plan for (the lead time plus the margin)."""
    cadence = ForecastCadence(
        step_s=_seconds("--forecast-step", forecast_step),
        reselect_every_s=_seconds("--reselect-every", reselect_every),
        refit_every_s=_seconds("--refit-every", refit_every or reselect_every),
        lookback_s=_seconds("--lookback", lookback),
        lead_s=lead_s,
        seed=seed,
    )
    if cadence.refit_every_s > cadence.reselect_every_s:
        raise ValueError("--refit-every must not exceed --reselect-every")
    return cadence


def _check_forecast_step(cadence: ForecastCadence, step_s: float, *, step_text: str, forecast_step_text: str) -> None:
    if cadence.step_s < step_s or cadence.step_s % step_s:
        raise ValueError(f"--forecast-step ({forecast_step_text}) must be a whole multiple of --step ({step_text})")


def _output(
    result: SimulationResult,
    input_name: str,
    pods: bool,
    gpu_hour_price: float | None,
    output_format: str,
    plot_path: Path | None,
) -> None:
    """The report on stdout (JSON or a table), and the pictures when asked for."""
    report = build_report(result, input_name=input_name, pods=pods, gpu_hour_price=gpu_hour_price)
    emit(report, output_format, render_table, plot_path, lambda path: plot(result, path))
