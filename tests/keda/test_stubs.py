"""The committed stubs are what scripts/generate-keda-stubs.sh makes from the vendored proto today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_repository import ROOT

PACKAGE = Path("autoscaler/keda")
GENERATED = tuple(f"externalscaler_pb2{kind}{suffix}" for kind in ("", "_grpc") for suffix in (".py", ".pyi"))


def test_committed_stubs_equal_freshly_generated_ones(tmp_path):
    subprocess.run(
        [str(ROOT / "scripts/generate-keda-stubs.sh"), str(tmp_path)],
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    fresh = sorted(path.name for path in (tmp_path / PACKAGE).iterdir())
    assert fresh == sorted(GENERATED)
    for name in GENERATED:
        assert (tmp_path / PACKAGE / name).read_text() == (ROOT / PACKAGE / name).read_text(), (
            f"{PACKAGE / name} is not what scripts/generate-keda-stubs.sh makes: run it and commit the result"
        )


def test_the_vendored_proto_keeps_its_attribution_and_the_upstream_text():
    proto = (ROOT / PACKAGE / "externalscaler.proto").read_text()
    assert proto.startswith(
        "// Source: kedacore/keda, pkg/scalers/externalscaler/externalscaler.proto "
        "(commit 125494be45e8ea3ba1bd734a697e4a5bcd397197).\n// License: Apache-2.0"
    )
    assert "service ExternalScaler {" in proto and "rpc StreamMetricSpec(ScaledObjectRef)" in proto
