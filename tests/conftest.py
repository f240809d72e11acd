"""Fixtures shared by every test package."""

from tests.fakekube import fake_kube, kube_api

__all__ = ["fake_kube", "kube_api"]
