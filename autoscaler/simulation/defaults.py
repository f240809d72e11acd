"""Defaults of the simulator that the command line shows in its help, kept free of heavy imports so
that ``gpu-autoscaler simulate --help`` answers without loading NumPy or pandas."""

from __future__ import annotations

from typing import Literal

# The controller's ``--horizontal-pod-autoscaler-tolerance``: an unset behavior tolerance.
DEFAULT_TOLERANCE = 0.1

ActuationKind = Literal["placeholder-hpa", "capacity-buffer"]
ACTUATIONS: tuple[ActuationKind, ...] = ("placeholder-hpa", "capacity-buffer")
# GPUs one placeholder pod requests (the shipped placeholder Deployment's).
PLACEHOLDER_GPUS = 1
