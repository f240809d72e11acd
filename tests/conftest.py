"""Fixtures shared by every test package, and the check that the public traces are there."""

import pytest
from hypothesis import HealthCheck, settings

from tests import traces
from tests.fakekube import fake_kube, kube_api
from tests.prometheus_fixture import fault_proxy, prometheus, prometheus_blocks, prometheus_restartable

__all__ = ["fake_kube", "fault_proxy", "kube_api", "prometheus", "prometheus_blocks", "prometheus_restartable"]

# Property tests check behaviour, not speed (speed is for benchmarks/): on a busy 2-core machine an
# example may outlast Hypothesis' 200 ms deadline, or generating data trip its too_slow check, with
# nothing wrong in the code under test. Every other health check stays on.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

# Fixtures whose TSDB is backfilled from the traces; other tests that read them are marked ``traces``.
TRACE_FIXTURES = frozenset({"prometheus", "prometheus_blocks", "prometheus_restartable", "fault_proxy"})


def needs_traces(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return item.get_closest_marker("traces") is not None or not TRACE_FIXTURES.isdisjoint(fixtures)


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: only the tests that will run count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the traces a selected test needs, stop before any test runs, with the one message
    (never a skip, with or without CI)."""
    if any(needs_traces(item) for item in items) and (absent := traces.missing()):
        pytest.exit(traces.missing_message(absent), returncode=pytest.ExitCode.USAGE_ERROR)
