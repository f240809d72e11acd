"""What to serve and to which target, beyond the policy's pure functions (``autoscaler.policy``): the
metric plans a refresh runs, each metric with its optional service-level target, and the levels tuned
to those targets.

- ``plans``: what the refresher reads: the signals, the metrics made from them, and the cluster's facts.
- ``tuners``: every (metric, series) served to a target, each with its tuner, recorded and tuned by
  the refresher.
- ``target_levels``: one headroom series served to a service-level target: its record, its
  candidates' replayed ledgers, and the choice walk-forward tuning made.
- ``observed``: what a target chose, when and why, as the served value carries it (the API, the page and
  ``/metrics`` judge it live in ``scorecard.target_status``).
- ``candidates``: what a target chooses among, by name (levels, buffers with and without windows).
- ``reasons``: how a choice is explained (the target's figure in words, the notes its reason carries).
- ``target_store``: each target's record and choice on disk, so that they carry on across a restart.
- ``records``: a target's record of refreshes (times and rows) in two preallocated rings.
- ``candidate_ledgers``: a candidate's replayed minutes as a choice reads them (short and held
  GPU-seconds), kept and sent compactly: the minutes with something short and where held changes.
- ``launches``: what a pool's NodeClaims taught (lead times with retries, failed launches), as the
  replay of a target's candidates runs the pool.
- ``service_levels``: service-level targets: the cheapest candidate that met the target over the days
  before each decision, judged on its replayed outcome (walk-forward tuning); a quantile level only
  when clearly cheaper than the cheapest buffer that met; never a constant buffer the placeholder
  HPA would not move to from the buffer served.
"""
