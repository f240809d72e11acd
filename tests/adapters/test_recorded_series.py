"""A preset reads its recording rule's series when Prometheus holds them over the whole lookback, and the
raw kube-state-metrics series otherwise: a real Prometheus, backfilled both ways. The recorded series
says 7 GPUs where the raw series say 3, so the values pulled tell which was read."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from adapters.prometheus import presets
from adapters.prometheus.client import PrometheusClientSettings, PrometheusSource
from autoscaler.commands.cli import main
from autoscaler.refresh.sources import PrometheusSignalSource
from tests.prometheus_fixture import BackfillSeries, PrometheusServer, binaries_or_skip, write_blocks

pytestmark = pytest.mark.prometheus

LOOKBACK = timedelta(days=2)
END = pd.Timestamp.now(tz="UTC").floor("min")
POD = {"namespace": "ml", "pod": "train-0", "node": "n1"}


def minutes(days: float) -> np.ndarray:
    count = int(days * 1440)
    return np.arange(int(END.timestamp()) - 60 * (count - 1), int(END.timestamp()) + 1, 60)


def backfill(recorded_days: float) -> list[BackfillSeries]:
    """Three days of one pod running 3 GPUs in pool a100, and the rule's series for the last
    ``recorded_days`` (saying 7: what a wrong read would show)."""
    raw = minutes(3)

    def constant(family: str, labels: dict[str, str], value: float, times: np.ndarray = raw) -> BackfillSeries:
        return BackfillSeries(family, labels, times, [f"{value:g}"] * len(times))

    return [
        constant("up", {"job": "kube-state-metrics", "instance": "ksm:8080"}, 1),
        constant("kube_node_labels", {"node": "n1", "label_karpenter_sh_nodepool": "a100"}, 1),
        constant(
            "kube_pod_container_resource_requests",
            {**POD, "container": "main", "resource": "nvidia_com_gpu", "unit": "integer"},
            3,
        ),
        constant("kube_pod_status_phase", {"namespace": "ml", "pod": "train-0", "phase": "Running"}, 1),
        constant(presets.RECORDED_GPUS_REQUESTED, POD, 7, minutes(recorded_days)),
    ]


@pytest.fixture(params=[3.0, 0.5], ids=["recorded-over-the-lookback", "recorded-for-half-a-day"])
def prometheus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[PrometheusServer, float]]:
    binary, promtool = binaries_or_skip()
    blocks = write_blocks(backfill(request.param), promtool, tmp_path / "work")
    server = PrometheusServer(binary=binary, data_dir=blocks, trace=None, probe_at=END)
    server.start()
    try:
        yield server, request.param
    finally:
        server.stop()


async def test_the_recording_rule_is_read_only_when_it_covers_the_lookback(prometheus, caplog):
    server, recorded_days = prometheus
    caplog.set_level(logging.INFO, logger="autoscaler.refresh.sources")
    query = presets.gpus_requested(step=timedelta(minutes=5))
    assert query.recorded is not None  # the default units: the rule may be read
    async with PrometheusSource(PrometheusClientSettings(url=server.url)) as source:
        signal_source = PrometheusSignalSource(source, query, LOOKBACK)
        signals = await signal_source.pull(END.to_pydatetime())
    [a100] = [signal for signal in signals if signal.labels.get("nodepool") == "a100"]
    values = set(a100.series.dropna().tolist())
    if recorded_days >= 3:
        assert values == {7.0}, values
        assert signal_source.query.promql.count(presets.RECORDED_GPUS_REQUESTED) == 1
        assert "read from the recording rule" in caplog.text
    else:
        assert values == {3.0}, values
        assert presets.RECORDED_GPUS_REQUESTED not in signal_source.query.promql
        assert "read from the raw series: nothing recorded" in caplog.text
    assert signal_source.query.recorded is None  # chosen once, at the first pull


def test_the_report_reads_the_recording_rule_only_when_it_covers_its_range(prometheus, tmp_path):
    server, recorded_days = prometheus
    saved = tmp_path / "series"
    saved.mkdir()
    arguments = ["report", "--prometheus-url", server.url, "--since", "2d", "--output", str(tmp_path / "r.html")]
    arguments += ["--warmup", "12h", "--save-series", str(saved), "--policies", "reactive,auto:0.9"]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    values = set(pd.read_csv(saved / "nodepool-a100.csv")["value"])
    if recorded_days >= 3:
        assert values == {7.0}, values
        assert f"from the recording rule {presets.RECORDED_GPUS_REQUESTED}" in result.stderr
    else:
        assert values == {3.0}, values
        assert "from the raw kube-state-metrics series" in result.stderr
