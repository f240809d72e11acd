"""The docs' figures against the committed commands beside them, where the command is cheap to run and
its figures do not depend on the machine (sizes and simulated GPU-hours, not seconds)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
def test_the_fitted_selection_sizes_in_the_architecture_are_bench_refits():
    output = run_benchmark("benchmarks.bench_refit")
    pickled = [float(size) for size in re.findall(r"([\d.]+) MB pickled", output)]
    unpickled = [float(size) for size in re.findall(r"([\d.]+) MB unpickled", output)]
    assert len(pickled) == len(unpickled) == 6, output
    text = one_line("docs/architecture.md")
    assert f"pickles to {min(pickled):.2f}-{max(pickled):.2f} MB" in text
    # What unpickling allocates moves by a few kilobytes from run to run (tracemalloc counts the allocator's).
    low, high = map(float, re.search(r"takes ([\d.]+)-([\d.]+) MB once unpickled", text).groups())  # type: ignore[union-attr]
    assert low == pytest.approx(min(unpickled), abs=0.02) and high == pytest.approx(max(unpickled), abs=0.02)


@pytest.mark.slow
@pytest.mark.traces
def test_the_stitching_figures_in_the_service_levels_note_are_slo_stitchings(tmp_path: Path):
    output = run_benchmark("benchmarks.slo_stitching", "--out", str(tmp_path))
    apart = re.findall(r"total held GPU-h: run [\d,.]+, candidates [\d,.]+, apart \+([\d.]+)", output)
    assert len(apart) == 2, output  # static_buffer@1%, then scheduled_buffer@1%
    text = one_line("docs/service-levels.md")
    assert f"`static_buffer@1%` held {apart[0]} GPU-hours more than its candidates" in text
    assert f"`scheduled_buffer@1%` {apart[1]}" in text
