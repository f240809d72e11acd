"""gpu-autoscaler: predictive GPU autoscaling served on the Kubernetes external metrics API."""

__version__ = "0.1.0"
