"""The HPA's path: ``external_metrics`` serves ``external.metrics.k8s.io/v1beta1`` (discovery, metric lists)
from the provider's current snapshot. It imports ``shared`` and ``security`` only (import-linter holds it)."""
