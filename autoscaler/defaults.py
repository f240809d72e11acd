"""Lead times the settings, the demo and the command line share, free of heavy imports so that
``--help`` can show them (``gpu-autoscaler report --help`` loads neither pydantic nor pandas).

Two figures, on purpose:

- :data:`DEFAULT_LEAD_TIME`: the service's ``forecast.default_lead_time`` (the shipped configuration
  and the read-only trial), used until Karpenter's NodeClaims have taught a pool's real launch time;
  ``simulate --lead-time`` and ``report --lead-time`` default to it, so a replay plans as the service
  does out of the box.
- :data:`DEMO_LEAD_TIME`: the embedded demo's, longer so that the declared nightly window visibly
  raises ``gpu_headroom`` ahead of 02:00 UTC on its page.
"""

from __future__ import annotations

from datetime import timedelta

DEFAULT_LEAD_TIME = timedelta(minutes=5)
DEMO_LEAD_TIME = timedelta(minutes=10)


def minutes_text(duration: timedelta) -> str:
    """A whole number of minutes as a flag writes it (``5m``)."""
    minutes, rest = divmod(duration.total_seconds(), 60)
    if rest:
        raise ValueError(f"{duration} is not a whole number of minutes")
    return f"{int(minutes)}m"
