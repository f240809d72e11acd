"""The ops port, one concept per module:

- ``inspection`` (JSON, described by ``openapi``) and ``page`` (HTML, with ``charts``, and ``notes``: the
  forecast's notes in plain words): what is served and why, both reading ``views`` of the current snapshot
  (``buffer_views``, ``scorecard_views`` and ``launch_views`` for CapacityBuffers, the live scorecard and
  NodeClaim launches).
- ``queued_views``: beside each series, what waits in Kueue's queues in its pool.
- ``scorecard_metrics``, ``target_metrics``, ``launch_metrics``, ``queued_metrics``: collectors that put
  those (and Kueue's own wait histograms) on ``/metrics`` at scrape time.
"""
