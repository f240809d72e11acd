"""Fixtures shared by every test package."""

from tests.fakekube import fake_kube, kube_api
from tests.prometheus_fixture import fault_proxy, prometheus, prometheus_blocks, prometheus_restartable

__all__ = ["fake_kube", "fault_proxy", "kube_api", "prometheus", "prometheus_blocks", "prometheus_restartable"]
