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

# What each policy name means, where policies are chosen (``simulate --help``, ``report --help``).
# "\b" keeps click from rewrapping the table: a name is never split across lines.
POLICIES_HELP = """\b
Policies (--policies, comma-separated):
  reactive            what pods request now, nothing spare (no forecast)
  static_buffer:N     N GPUs spare at all times (static_buffer:16)
  scheduled           declared windows' GPUs, a lead time before they start
  scheduled_buffer:N  N GPUs spare plus the declared windows
  reactive_max:W      the most requested over the last W (reactive_max:60m)
  holt_winters        an off-the-shelf Holt-Winters forecast
  auto:Q              this service's forecast at quantile Q over the lead
                      time (auto:0.9: demand exceeds it about 1 step in 10)
  oracle              knows the demand ahead: a bound, not something to run
Tuned to a service level T, chosen again each day on how each candidate did
over the past 7 days (simulate: --tune-every, --tune-window):
  auto-slo:T          the cheapest that met T among forecast quantiles and
                      static buffers (what the service serves for a target)
  static_buffer@T     the cheapest N that met T; scheduled_buffer@T and
                      reactive_max@T (its W) likewise
T: 1% = at most 1 % of minutes with any GPU short (pods waiting for GPUs);
window-p95=2m = declared windows' pods started within 2 minutes at p95."""


def shown_list(policies: str) -> str:
    """A comma-separated default as help shows it, with a space after each comma so that the help's
    wrapping breaks between policies, never inside one."""
    return ", ".join(policies.split(","))
