"""``gpu-autoscaler simulate``: replay a demand series or a pod trace through a simulated cluster
(HPA on placeholder pods, or a CapacityBuffer; a Karpenter-like node pool) under several policies,
and compare them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pandas as pd
from click.core import ParameterSource

from autoscaler.commands.numbers import decimal, integer
from autoscaler.commands.output import emit
from autoscaler.commands.progress import progress_bar
from autoscaler.settings import ForecastSettings
from autoscaler.simulation.actuation import ACTUATIONS, PLACEHOLDER_GPUS, Actuation, ActuationKind
from autoscaler.simulation.forecasting import ForecastCadence
from autoscaler.simulation.hpa import DEFAULT_SCALE_DOWN, DEFAULT_TOLERANCE, HPASpec, ScalingRules, parse_tolerance
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
from autoscaler.simulation.report import build_report, plot, render_table
from autoscaler.simulation.runner import SimulationConfig, SimulationResult, simulate
from autoscaler.simulation.tuning import TuningSettings
from forecast.durations import parse_duration, parse_positive_duration

DEFAULT_POLICIES = "reactive,static_buffer:16,reactive_max:60m,scheduled,holt_winters,auto:0.9,auto:0.99,oracle"


def _seconds(flag: str, text: str, *, allow_zero: bool = False) -> float:
    parse = parse_duration if allow_zero else parse_positive_duration
    try:
        return float(parse(text).total_seconds())
    except ValueError as error:
        raise ValueError(f"{flag}: {error}") from None


@click.command("simulate")
@click.option("--input", "input_path", type=click.Path(path_type=Path), help="demand CSV(.gz): timestamp,value (GPUs)")
@click.option(
    "--pods",
    "pods_path",
    type=click.Path(path_type=Path),
    help="pod trace instead of --input: Alibaba v2023 openb_pod_list_*.csv(.gz), or arrival,duration,gpus",
)
@click.option("--step", default="1m", show_default=True, help="simulation step (demand resolution)")
@click.option("--gpus-per-node", default=8, show_default=True, type=integer())
@click.option("--lead-time", default="5m", show_default=True, help="node lead time the policies plan for")
@click.option(
    "--lead-time-distribution",
    default=None,
    help="real node lead times: fixed:D, lognormal:median=D,p95=D or uniform:min=D,max=D [default: fixed:LEAD-TIME]",
)
@click.option(
    "--lead-time-margin",
    # The service's own default, so that a replay plans as a deployed service would.
    default=f"{ForecastSettings().lead_time_margin.total_seconds():g}s",
    show_default=True,
    help="added by auto (the service's margin)",
)
@click.option("--warmup", default="7d", show_default=True, help="initial part that only trains forecasters")
@click.option("--policies", default=DEFAULT_POLICIES, show_default=True, help="comma-separated NAME[:PARAMETER]")
@click.option("--schedule", "schedules", multiple=True, help='declared window "CRON;GPUS;DURATION" (UTC), repeatable')
@click.option("--consolidate-after", default="10m", show_default=True, help="empty nodes go after this")
@click.option("--gpu-hour-price", type=decimal(), default=None, help="adds cost = provisioned GPU-hours x price")
@click.option("--format", "output_format", type=click.Choice(["json", "table"]), default="json", show_default=True)
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), default=None, help="write a PNG here")
@click.option("--forecast-step", default="5m", show_default=True, help="the forecasters' step (signal step)")
@click.option("--reselect-every", default="6h", show_default=True, help="full model selection cadence")
@click.option(
    "--refit-every",
    default=None,
    help="refit of the selected models between selections (default: none; every forecast step forecasts "
    "from the newest data with the fitted models, as the service does)",
)
@click.option("--lookback", default="14d", show_default=True, help="history each fit sees")
@click.option(
    "--scale-down-stabilization", default="300s", show_default=True, help="the placeholder HPA's scale-down window"
)
@click.option(
    "--hpa-tolerance",
    default=f"{DEFAULT_TOLERANCE:g}",
    show_default=True,
    help="the placeholder HPA's behavior.scaleUp/scaleDown.tolerance: T for both, or up=T,down=T "
    "(the shipped manifests: up=0,down=0.05; an unset one is 0.1)",
)
@click.option(
    "--actuation",
    type=click.Choice(ACTUATIONS),
    default="placeholder-hpa",
    show_default=True,
    help="how headroom becomes spare capacity: an HPA scaling 1-GPU placeholder pods, or a CapacityBuffer's "
    "spec.replicas written at every step (virtual pods, no HPA, nothing preempted)",
)
@click.option(
    "--buffer-chunk-gpus",
    type=integer(),
    default=None,
    help=f"GPUs of one CapacityBuffer replica (its PodTemplate), with --actuation capacity-buffer "
    f"[default: {PLACEHOLDER_GPUS}, a placeholder's size]",
)
@click.option(
    "--buffer-limit-gpus",
    type=integer(min=0),
    default=None,
    help="the CapacityBuffer's spec.limits on its GPU resource, with --actuation capacity-buffer: the "
    "autoscaler provisions at most the whole chunks that fit [default: no limits]",
)
@click.option(
    "--sweep-static",
    is_flag=True,
    help="also run static_buffer:0,1,2,... until past the costliest auto policy's GPU-hours, and compare "
    "auto with the best of every policy run (JSON: static_sweep, frontier)",
)
@click.option(
    "--sweep-rolling-max",
    is_flag=True,
    help="also run reactive_max:5m,10m,15m,... until past the costliest auto policy's GPU-hours "
    "(JSON: rolling_max_sweep; the frontier compares auto with every heuristic run)",
)
@click.option(
    "--tune-every",
    default="1d",
    show_default=True,
    help="tuned policies (auto-slo:T, static_buffer@T, reactive_max@T) choose again this often",
)
@click.option(
    "--tune-window", default="7d", show_default=True, help="tuned policies judge their candidates over this past"
)
@click.option(
    "--tune-gain",
    type=decimal(0, 2),
    default=0.0,
    show_default=True,
    help="auto-slo's online calibration: the level asked moves by GAIN x (target - attained) each period",
)
@click.option(
    "--pools",
    "pools_path",
    type=click.Path(path_type=Path),
    default=None,
    help="several node pools (YAML or JSON: name, weight, gpus_per_node, lead_time, capacity_type, "
    "price_per_gpu_hour, limit_gpus), tried heaviest first with fallback; cost = each pool's GPU-hours x its price",
)
@click.option(
    "--launch-failure-rate",
    type=decimal(0, 1, max_open=True),
    default=0.0,
    show_default=True,
    help="probability that a node launch fails (retried by a new batch, or falling back to the next pool)",
)
@click.option(
    "--spot-interruptions",
    type=decimal(0),
    default=0.0,
    show_default=True,
    help="interruptions per spot node-hour (2-minute notice; the node's pods are Pending again); "
    "without --pools the one pool is a spot pool",
)
@click.option("--workers", default=1, show_default=True, type=integer(1, 64), help="processes")
@click.option("--seed", default=0, show_default=True, type=integer())
def simulate_command(
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
    tune_every: str,
    tune_window: str,
    tune_gain: float,
    workers: int,
    seed: int,
    **capacity: Any,
) -> None:
    """Simulate GPU pre-provisioning (placeholders or a CapacityBuffer) under several policies and compare them."""
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
            cadence=cadence, actuation=actuated, seed=seed, tuning=_tuning(tune_every, tune_window, tune_gain),
            **_capacity(capacity, gpus_per_node, distribution, gpu_hour_price),
        )  # fmt: skip
        workload = _workload(source, pods_path is not None, step_s, windows, gpus_per_node)
        with progress_bar("simulating") as progress:
            result = simulate(
                workload, specs, config, workers=workers, progress=progress,
                sweep_static=sweep_static, sweep_rolling_max=sweep_rolling_max,
            )  # fmt: skip
    except (InputError, ValueError) as error:
        raise click.UsageError(str(error)) from None
    _output(result, str(source), pods_path is not None, gpu_hour_price, output_format, plot_path)


def _windows(schedules: tuple[str, ...]) -> tuple[WindowSchedule, ...]:
    return tuple(parse_schedule(text) for text in schedules)


def _tuning(every: str, window: str, gain: float) -> TuningSettings:
    every_s, window_s = _seconds("--tune-every", every), _seconds("--tune-window", window)
    tuning = TuningSettings(every_s=every_s, window_s=window_s, gain=gain)
    if tuning.window_s < tuning.every_s:
        raise ValueError(f"--tune-window ({window}) must be at least --tune-every ({every})")
    return tuning


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
