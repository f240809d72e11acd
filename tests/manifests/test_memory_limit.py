"""The shipped memory limit is the one the failover benchmark's page measured replicas against."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
UNITS = {"Mi": 1, "Gi": 1024}


def _mebibytes(quantity: str) -> float:
    found = re.fullmatch(r"(\d+)(Mi|Gi)", quantity)
    assert found is not None, f"a memory quantity in Mi or Gi, got {quantity!r}"
    return int(found.group(1)) * UNITS[found.group(2)]


def test_the_memory_limit_holds_the_peak_measured_at_3000_series() -> None:
    deployment = yaml.safe_load((ROOT / "manifests/base/deployment.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    limit = container["resources"]["limits"]["memory"]
    page = (ROOT / "docs/benchmarks/failover.md").read_text()
    assert f"`limits.memory: {limit}`" in page
    measured = re.search(r"peaked at ([\d,]+) MiB \(service and worker\) serving 3,000 series", page)
    assert measured is not None, "the page states the peak of one replica serving 3,000 series"
    assert float(measured.group(1).replace(",", "")) <= _mebibytes(limit)
