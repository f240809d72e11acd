"""The docs' figures against the committed commands beside them, where the command is cheap to run and
its figures do not depend on the machine (sizes and simulated GPU-hours, not seconds)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from tests import traces
from tests.prometheus_fixture import binaries_or_skip

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(*arguments: str) -> str:
    finished = subprocess.run(
        [sys.executable, "-m", *arguments],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-2000:]
    return finished.stdout


def one_line(path: str) -> str:
    """The page's text with line breaks as spaces (figures wrap)."""
    return re.sub(r"\s+", " ", (ROOT / path).read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.traces
def test_the_stitching_figures_in_the_service_levels_note_are_slo_stitchings(tmp_path: Path) -> None:
    output = run_benchmark("benchmarks.slo_stitching", "--out", str(tmp_path))
    apart = re.findall(r"total held GPU-h: run [\d,.]+, candidates [\d,.]+, apart \+([\d.]+)", output)
    assert len(apart) == 2, output  # static_buffer@1%, then scheduled_buffer@1%
    text = one_line("docs/service-levels.md")
    assert f"`static_buffer@1%` held {apart[0]} GPU-hours more than its candidates" in text
    assert f"`scheduled_buffer@1%` {apart[1]}" in text


def plain(path: str) -> str:
    """``one_line`` without Markdown's bold, which the pages put on figures they stress."""
    return one_line(path).replace("**", "")


@pytest.mark.slow
@pytest.mark.prometheus
def test_the_idle_pool_row_of_this_tree_is_idle_pools() -> None:
    binaries_or_skip()
    output = run_benchmark("benchmarks.idle_pool")
    served = re.search(r"demand ([\d.]+), headroom ([\d.]+) GPUs", output)
    idle = re.search(r"'idle GPU-hours': ([\d.]+), 'pool empty after': '(\d+) min'", output)
    assert served and idle, output
    text = one_line("docs/benchmarks/idle-pool.md")
    row = f"| this change | demand {served[1]}, headroom {served[2]} | {idle[1]} (the last nodes' 10 min"
    assert row in text and f"`consolidateAfter`) | {idle[2]} min |" in text


@pytest.mark.slow
@pytest.mark.prometheus
def test_the_affinity_window_table_is_affinity_windows() -> None:
    binaries_or_skip()
    output = run_benchmark("benchmarks.affinity_window")
    rows = re.findall(r"lead (5m|390s)\s+\S+\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)", output)
    assert len(rows) == 6, output
    text = plain("docs/benchmarks/affinity-window.md")
    for _lead, headroom, provisioned, idle, p95, longest in rows:
        assert f"| {headroom} | {provisioned} ({idle}) | {float(p95):g} s ({longest} s) |" in text, (_lead, headroom)


@pytest.mark.slow
@pytest.mark.traces
def test_the_bounds_on_a_forecasters_gain_in_the_backtest_page_are_goal_bounds() -> None:
    output = run_benchmark("benchmarks.goal_bounds", "quantile")
    rows = {
        (trace, origins): tuple(f"{float(share):.1f} %" for share in shares)
        for trace, origins, *shares in re.findall(
            r"^(\w+)\s+(all|28)\s+[\d.]+\s+([+-][\d.]+)%\s+([+-][\d.]+)%\s+([+-][\d.]+)%$", output, re.MULTILINE
        )
    }
    assert len(rows) == 8, output
    text = one_line("docs/benchmarks/backtest.md")
    constant, hourly, shift = rows["alibaba_pod_creations_per_min", "all"]
    assert f"those score {constant}, {hourly} and {shift} against the baseline" in text.replace("+", "")
    constant, hourly, _shift = rows["alibaba_pod_creations_per_min", "28"]
    assert f"does the hindsight constant reach {constant} (and the hourly one {hourly})" in text
    every, scored = (rows["alibaba_running_gpus", origins][2].lstrip("-") for origins in ("all", "28"))
    assert f"gains {every} (all origins) and {scored} (28)" in text


@pytest.mark.slow
@pytest.mark.traces
def test_the_publication_sizes_and_requests_in_high_availability_are_bench_publications() -> None:
    output = run_benchmark("benchmarks.bench_publication", "--series", "1000", "--shards", "16,64")
    blocks = re.findall(
        r"(\d+) shards: largest object (\d+) KiB.*?\n\s+first \(creates\)\s+(\d+) requests.*?\n"
        r"\s+all values changed\s+(\d+) requests.*?\(([\d.]+) requests/s.*?\n\s+nothing changed\s+(\d+) requests",
        output,
    )
    assert len(blocks) == 2, output
    text = one_line("docs/high-availability.md")
    for shards, largest, first, changed, per_second, unchanged in blocks:
        row = re.search(rf"\| 1,000 \| {shards} \| (\d+) KiB \| (\d+)[^|]*\| (\d+) \(([\d.]+)/s[^|]*\| (\d+) \|", text)
        assert row, shards
        assert row.groups() == (largest, first, changed, per_second, unchanged)


@pytest.mark.slow
@pytest.mark.traces
def test_the_hourly_buffer_figures_in_the_service_levels_note_are_hourly_buffers(tmp_path: Path) -> None:
    from tests.data_helpers import trace, write_csv

    # (mean buffer, share missed) per trace, target and rule, as the command prints them
    printed: dict[tuple[str, str, str], tuple[float, Decimal]] = {}
    for name in ("helios_running_gpus", "alibaba_running_gpus"):
        path = write_csv(trace(name, "1min"), tmp_path / f"{name}.csv.gz")
        output = run_benchmark("benchmarks.hourly_buffer", str(path))
        for target, rule, buffer, missed in re.findall(
            r"target ([\d.]+)%, (one buffer|a buffer per hour): mean buffer ([\d.]+) GPUs, ([\d.]+)% of minutes missed",
            output,
        ):
            printed[name, f"{float(target):g}", rule] = (float(buffer), Decimal(missed))
    assert len(printed) == 8, printed

    def saved(name: str, target: str) -> str:
        return f"{1 - printed[name, target, 'a buffer per hour'][0] / printed[name, target, 'one buffer'][0]:.0%}"

    def missed_range(target: str, rule: str) -> str:
        # the page rounds the printed thousandths half up, as a reader does (1.065 is 1.07)
        shares = [printed[name, target, rule][1] for name in ("helios_running_gpus", "alibaba_running_gpus")]
        low, high = (share.quantize(Decimal("0.01"), ROUND_HALF_UP) for share in (min(shares), max(shares)))
        return f"{low}-{high} %"

    text = one_line("docs/service-levels.md")
    assert (
        f"It held {saved('helios_running_gpus', '1')[:-1]} % (Helios, 1 %) to "
        f"{saved('alibaba_running_gpus', '0.3')[:-1]} % (Alibaba, 0.3 %) less buffer, but missed "
        f"{missed_range('1', 'a buffer per hour')} of minutes at a 1 % target "
        f"(one buffer: {missed_range('1', 'one buffer')}) and {missed_range('0.3', 'a buffer per hour')} at 0.3 % "
        f"(one buffer: {missed_range('0.3', 'one buffer')})"
    ) in text


@pytest.mark.slow
@pytest.mark.traces
def test_the_heuristics_behind_a_quota_in_the_quota_queue_page_are_simulates() -> None:
    pods = traces.path("alibaba_gpu_v2023/openb_pod_list_default.csv.gz")
    output = run_benchmark(
        "autoscaler", "simulate", "--pods", str(pods), "--step", "1m", "--gpus-per-node", "8", "--lead-time", "5m",
        "--warmup", "7d", "--consolidate-after", "10m", "--workers", "1", "--format", "json", "--quota-gpus", "56",
        "--admission-check-delay", "5m", "--policies", "reactive,static_buffer@1%,reactive_max@1%",
    )  # fmt: skip
    text = plain("docs/benchmarks/quota-queue.md")
    for policy, figures in json.loads(output)["policies"].items():
        waits = figures["queue_wait_seconds"]
        cells = [f"{figures[key]:,.0f}" for key in ("provisioned_gpu_hours", "idle_gpu_hours", "short_gpu_minutes")]
        cells += [" / ".join(f"{waits[kind][at]:,.0f}" for at in ("p50", "p95", "max")) for kind in waits]
        assert f"| {policy} | no | {' | '.join(cells)} |" in text, policy
