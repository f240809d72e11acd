"""Checks before serving: can the service run here, and what does a Prometheus offer it.

- ``preflight``: ``gpu-autoscaler preflight`` and ``serve``'s start-up check: the APIService, RBAC, the
  authentication ConfigMap and the custom resources the configuration needs.
- ``apiservice_owner``: who serves ``v1beta1.external.metrics.k8s.io``, and which install overlay fits.
- ``trial``: trying the service read-only on your own Prometheus (docs/try-it.md): what it has, and
  the settings that read it.
"""
