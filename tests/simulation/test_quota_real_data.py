"""The quota queue (``simulate --quota-gpus``) on the shared Alibaba v2023 pod list."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from autoscaler.commands.simulate import simulate_command
from tests import traces

pytestmark = [pytest.mark.slow, pytest.mark.traces]


def test_alibaba_pods_behind_a_quota(tmp_path):
    """Three days of the real pod list behind a ClusterQueue of 24 GPUs (the
    cut requests 10 GPUs at the median minute, 27 at the 99th percentile), with 5-minute admission checks."""
    pods = pd.read_csv(traces.path("alibaba_gpu_v2023/openb_pod_list_default.csv.gz"))
    cutoff = pods.deletion_time.min() + 3 * 86400
    short_list = tmp_path / "openb_pod_list_default.csv.gz"
    pods[pods.deletion_time <= cutoff].to_csv(short_list, index=False)
    result = CliRunner().invoke(
        simulate_command,
        ["--pods", str(short_list), "--warmup", "1d", "--policies", "reactive,static_buffer:8",
         "--quota-gpus", "24", "--admission-check-delay", "5m"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    seen = report["quota_queue"]["demand_seen"]
    assert seen["waiting_for_quota"]["gpu_hours"] > 0  # a real queue: Workloads waited for quota
    assert seen["workloads_counted"]["gpu_hours"] > 0  # reserved, in their checks, counted by the service
    total = seen["without_workloads"]["gpu_hours"] + seen["workloads_counted"]["gpu_hours"]
    assert seen["with_workloads"]["gpu_hours"] == pytest.approx(total, abs=0.002)
    for figures in report["policies"].values():
        waits = figures["queue_wait_seconds"]
        assert waits["quota"]["max"] > 0 and waits["quota"]["p50"] >= 0
        assert waits["admission_check"]["p50"] == 300.0  # every check takes 5 minutes (the last may be cut)
        assert waits["admission_check"]["count"] == waits["quota"]["count"] >= waits["capacity"]["count"]
    reactive, buffered = (report["policies"][text]["queue_wait_seconds"]["capacity"] for text in report["policies"])
    # Without spare capacity a pod waits at most the batch and the lead time for its node.
    assert reactive["max"] <= 301 + 1e-6 and reactive["p95"] > 0
    assert buffered["p95"] <= reactive["p95"]
    assert np.isfinite(report["policies"]["reactive"]["capacity_wait_p95_s"])
