"""The ops port, one concept per module:

- ``inspection`` (JSON, described by ``openapi``) and ``page`` (HTML, with ``charts``, and ``notes``: the
  forecast's notes in plain words): what is served and why, both reading ``views`` of the current snapshot
  (``buffer_views``, ``scorecard_views`` and ``launch_views`` for CapacityBuffers, the live scorecard and
  NodeClaim launches).
- ``scorecard_metrics``, ``target_metrics``, ``launch_metrics``: collectors that put those on ``/metrics`` at
  scrape time.
"""
