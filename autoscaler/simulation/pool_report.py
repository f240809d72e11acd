"""The run's settings and costs in the report: what a run with several pools (or scarce capacity)
adds (the cost in money summed over the pools, each pool's held GPU-hours times its price, each pool's
figures, and the settings), and how headroom became spare capacity (``actuation_figures``)."""

from __future__ import annotations

from typing import Any

from autoscaler.simulation.actuation import BUFFER_RESYNC_OFFSET_S, BUFFER_RESYNC_S, PLACEHOLDER_GPUS, Actuation
from autoscaler.simulation.engine import Outcome
from autoscaler.simulation.runner import SimulationConfig


def cost_figures(outcome: Outcome, provisioned_s: float, gpu_hour_price: float | None) -> dict[str, Any]:
    """``cost`` (and ``pools``): over the pools when there are several, else provisioned GPU-hours
    times ``--gpu-hour-price`` when given; nothing otherwise."""
    if outcome.cost is not None:
        pools = {
            name: {key: round(value, 3) if isinstance(value, float) else value for key, value in figures.items()}
            for name, figures in outcome.pools.items()
        }
        return {"cost": round(outcome.cost, 2), "pools": pools}
    if gpu_hour_price is not None:
        return {"cost": round(provisioned_s / 3600 * gpu_hour_price, 2)}
    return {}


def pool_settings(config: SimulationConfig) -> dict[str, Any]:
    """The pools in weight order and the scarcity, when the run had them."""
    if config.pools is None:
        return {}
    return {
        "pools": [pool.model_dump() for pool in config.pools],
        "launch_failure_rate": config.scarcity.launch_failure_rate,
        "spot_interruptions_per_node_hour": config.scarcity.spot_interruptions_per_node_hour,
    }


def actuation_figures(actuation: Actuation) -> dict[str, Any]:
    """How headroom became spare capacity in this run, and the settings that shaped it."""
    if actuation.buffer:
        return {
            "kind": actuation.kind,
            "buffer_chunk_gpus": actuation.chunk_gpus,
            "buffer_limit_gpus": actuation.limit_gpus,
            "resync_seconds": BUFFER_RESYNC_S,
            "resync_offset_seconds": BUFFER_RESYNC_OFFSET_S,
        }
    hpa = actuation.hpa
    return {
        "kind": actuation.kind,
        "placeholder_gpus": PLACEHOLDER_GPUS,
        "hpa_tolerance": {"scale_up": hpa.tolerance.scale_up, "scale_down": hpa.tolerance.scale_down},
        "scale_down_stabilization_seconds": hpa.scale_down.stabilization_window_seconds,
    }
