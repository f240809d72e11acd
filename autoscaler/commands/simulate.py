"""``gpu-autoscaler simulate``: replay a demand series or a pod trace through a simulated cluster
(HPA on placeholder pods, or a CapacityBuffer; a Karpenter-like node pool) under several policies,
and compare them.

The options only: what runs is autoscaler/commands/simulate_run.py, imported when the command runs
(``--help`` loads none of NumPy, pandas or the settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autoscaler.commands.numbers import decimal, integer
from autoscaler.defaults import DEFAULT_LEAD_TIME, DEMO_LEAD_TIME, minutes_text
from autoscaler.simulation.defaults import ACTUATIONS, DEFAULT_TOLERANCE, PLACEHOLDER_GPUS, POLICIES_HELP, shown_list

DEFAULT_POLICIES = "reactive,static_buffer:16,reactive_max:60m,scheduled,holt_winters,auto:0.9,auto:0.99,oracle"
# The service's own forecast.lead_time_margin, so that a replay plans as a deployed service would
# (tests/simulation/test_cmd_simulate.py holds the two equal).
LEAD_TIME_MARGIN = "90s"
SUMMARY = "Simulate GPU pre-provisioning (placeholders or a CapacityBuffer) under several policies and compare them."
# Run from a clone (the demo's data is in it); tests/autoscaler/test_cli_help.py runs the first one.
EXAMPLES = """\b
Examples, from a clone (each prints a table; JSON without --format table):
  # three heuristics on the demo's 28 days of Helios GPU requests (seconds)
  gpu-autoscaler simulate --step 5m --format table \\
    --input autoscaler/demo_data/helios_earth_running_gpus_5m.csv.gz \\
    --policies reactive,static_buffer:16,reactive_max:60m
  # the service's forecast against a buffer tuned to 1 % of minutes short
  # (minutes: the forecasters are fitted again every 6 h of the 28 days)
  gpu-autoscaler simulate --step 5m --format table \\
    --input autoscaler/demo_data/helios_earth_running_gpus_5m.csv.gz \\
    --policies reactive,auto:0.9,auto-slo:1%,static_buffer@1%
  # Alibaba's pod list on a CapacityBuffer, node launches of median 5 min and
  # p95 9 min (minutes; the file: `make traces`, in alibaba_gpu_v2023/ of the
  # directory `.venv/bin/python -m tests.traces where` prints)
  gpu-autoscaler simulate --format table --actuation capacity-buffer \\
    --pods openb_pod_list_default.csv.gz \\
    --lead-time-distribution lognormal:median=5m,p95=9m \\
    --policies reactive,static_buffer@1%

More: docs/command-line.md, docs/service-levels.md."""


@click.command("simulate", help=f"{SUMMARY}\n\n{POLICIES_HELP}", epilog=EXAMPLES)
@click.option("--input", "input_path", type=click.Path(path_type=Path), help="demand CSV(.gz): timestamp,value (GPUs)")
@click.option(
    "--pods",
    "pods_path",
    type=click.Path(path_type=Path),
    help="pod trace instead of --input: Alibaba v2023 openb_pod_list_*.csv(.gz), or arrival,duration,gpus",
)
@click.option(
    "--unit-pods",
    is_flag=True,
    help="replay --input as one-GPU pods (rises arrive, falls end the newest), as report does, not as fluid demand",
)
@click.option("--step", default="1m", show_default=True, help="simulation step (demand resolution)")
@click.option("--gpus-per-node", default=8, show_default=True, type=integer())
@click.option(
    "--lead-time",
    default=minutes_text(DEFAULT_LEAD_TIME),
    show_default=True,
    help=f"node lead time the policies plan for (the service's forecast.default_lead_time; the demo uses "
    f"{minutes_text(DEMO_LEAD_TIME)})",
)
@click.option(
    "--lead-time-distribution",
    default=None,
    help=(
        "real node lead times: fixed:D, lognormal:median=D,p95=D, uniform:min=D,max=D or empirical:D,D,... "
        "(measured ones) [default: fixed:LEAD-TIME]"
    ),
)
@click.option(
    "--lead-time-margin",
    default=LEAD_TIME_MARGIN,
    show_default=True,
    help="added by auto (the service's margin)",
)
@click.option("--warmup", default="7d", show_default=True, help="initial part that only trains forecasters")
@click.option(
    "--policies",
    default=DEFAULT_POLICIES,
    help=f"comma-separated policies to compare (what each name means: Policies, above) "
    f"[default: {shown_list(DEFAULT_POLICIES)}]",
)
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
    "--tune-restart-burn",
    type=decimal(0, 1000),
    default=3.0,
    show_default=True,
    help="auto-slo after a level shift: --tune-restart-periods periods in a row it attained worse than BURN x the "
    "target restart its judged window at the first of them (0: off)",
)
@click.option(
    "--tune-restart-periods",
    type=integer(1, 1000),
    default=2,
    show_default=True,
    help="how many periods in a row past --tune-restart-burn make a level shift",
)
@click.option(
    "--tune-drift-burn",
    type=decimal(0, 1000),
    default=2.0,
    show_default=True,
    help="auto-slo after a level shift, too: --tune-drift-periods of the last --tune-drift-window periods worse "
    "than BURN x the target restart its judged window at the first of them (0: off)",
)
@click.option("--tune-drift-periods", type=integer(1, 1000), default=3, show_default=True, help="see --tune-drift-burn")
@click.option("--tune-drift-window", type=integer(1, 1000), default=4, show_default=True, help="see --tune-drift-burn")
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
@click.option(
    "--quota-gpus",
    type=integer(1),
    default=None,
    help="queue the pods behind a Kueue ClusterQueue with this nominal GPU quota (BestEffortFIFO by creation; "
    "each pod a Job of one pod, created once its Workload is admitted); JSON: quota_queue, queue_wait_seconds",
)
@click.option(
    "--admission-check-delay",
    default="0s",
    show_default=True,
    help="with --quota-gpus: how long the ClusterQueue's admission checks take from quota reserved to admitted",
)
@click.option(
    "--see-workloads/--no-see-workloads",
    default=True,
    show_default=True,
    help="with --quota-gpus: whether auto serves the Workloads the live service counts (inputs.kueue)",
)
@click.option("--workers", default=1, show_default=True, type=integer(1, 64), help="processes")
@click.option("--seed", default=0, show_default=True, type=integer())
def simulate_command(**options: Any) -> None:
    """SUMMARY, POLICIES_HELP and EXAMPLES, above."""
    from autoscaler.commands.simulate_run import run

    run(**options)
