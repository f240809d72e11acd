"""The recording rules the presets can read (manifests/monitoring/prometheusrule.yaml): the shipped rule
is the preset's own inner aggregation, and a preset reads the same through it as through the raw
kube-state-metrics series (``promtool test rules``, both queries as the service sends them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from adapters.prometheus import presets
from tests.manifests.test_manifests import rule_groups, tool

PLACEHOLDERS = "gpu-placeholders"

# Minute by minute for 20 minutes: pool a100's node n1 runs 2 whole GPUs (p1) and an A30's 1g MIG
# slice (p3, a quarter of a GPU: exact in binary, so that no order of summing rounds apart), and 4 GPUs
# of placeholders (p4, left out); p2 waits for a node (no node label: the pool-less series); p5 has
# finished (not counted). From minute 12, p6 adds 3 GPUs in a100.
INPUT_SERIES = [
    ("kube_node_labels", {"node": "n1", "label_karpenter_sh_nodepool": "a100"}, "1x20"),
    *(
        (
            "kube_pod_container_resource_requests",
            {"namespace": namespace, "pod": pod, "container": "main", "node": node, "resource": resource},
            values,
        )
        for namespace, pod, node, resource, values in (
            ("ml", "p1", "n1", "nvidia_com_gpu", "2x20"),
            ("ml", "p2", "", "nvidia_com_gpu", "1x20"),
            ("ml", "p3", "n1", "nvidia_com_mig_1g_6gb", "1x20"),
            (PLACEHOLDERS, "p4", "n1", "nvidia_com_gpu", "4x20"),
            ("ml", "p5", "n1", "nvidia_com_gpu", "8x20"),
            ("ml", "p6", "n1", "nvidia_com_gpu", "_x11 3x8"),
        )
    ),
    *(
        ("kube_pod_status_phase", {"namespace": namespace, "pod": pod, "phase": phase}, values)
        for namespace, pod, phase, values in (
            ("ml", "p1", "Running", "1x20"),
            ("ml", "p2", "Pending", "1x20"),
            ("ml", "p3", "Running", "1x20"),
            (PLACEHOLDERS, "p4", "Running", "1x20"),
            ("ml", "p5", "Succeeded", "1x20"),
            ("ml", "p5", "Running", "0x20"),
            ("ml", "p6", "Running", "_x11 1x8"),
        )
    ),
]


def series_text(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{key}="{value}"' for key, value in labels.items() if value) + "}"


def test_the_shipped_rule_is_the_presets_own_inner_aggregation():
    shipped = next(group for group in rule_groups() if group["name"] == "gpu-autoscaler-presets")
    assert [(rule["record"], rule["expr"]) for rule in shipped["rules"]] == [
        (rule["record"], rule["expr"]) for rule in presets.recording_rules()
    ]


@pytest.mark.prometheus
def test_a_preset_reads_the_same_through_the_recording_rule_as_through_the_raw_series(tmp_path: Path):
    promtool = tool("promtool")
    shipped = next(group for group in rule_groups() if group["name"] == "gpu-autoscaler-presets")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [shipped]}))
    expected = {
        "10m": [('{nodepool="a100"}', 2.25), ("{}", 1.0)],
        "15m": [('{nodepool="a100"}', 5.25), ("{}", 1.0)],
    }
    tests = []
    for recorded in (False, True):
        query = presets.gpus_requested(exclude_namespaces=(PLACEHOLDERS,), recorded=recorded)
        for expression in (query.promql, query.range_promql):  # the value at a moment, and the step's peak
            for at, samples in expected.items():
                tests.append(
                    {
                        "expr": expression,
                        "eval_time": at,
                        "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
                    }
                )
    document = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "name": "gpus_requested, raw and recorded",
                "interval": "1m",
                "input_series": [
                    {"series": series_text(name, labels), "values": values} for name, labels, values in INPUT_SERIES
                ],
                "promql_expr_test": tests,
            }
        ],
    }
    (tmp_path / "presets_test.yaml").write_text(yaml.safe_dump(document, width=10_000))
    tested = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "presets_test.yaml")], capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert len(tests) == 8


def test_recorded_refuses_other_gpu_units_naming_the_rule():
    with pytest.raises(ValueError, match="recorded: the recording rule namespace_pod_node:gpu_autoscaler"):
        presets.gpus_requested(resource="amd.com/gpu", recorded=True)
