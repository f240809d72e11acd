"""The scorecard: how well the served headroom did, live and in the simulator, with one set of definitions
(docs/scorecard.md).

- ``figures``: one definition of every outcome figure (minute ledger, short GPU-minutes, waits),
  shared by the live service and the simulator.
- ``live``: the live scorecard of every pool this replica owns, collected once a refresh.
- ``target_status``: each headroom's service-level target observed: live and replayed attainment,
  error budget, the candidate chosen and why.
- ``pools``: one pool's live scorecard: the last 7 days of minutes, waits and judgments, and totals.
- ``pods``: capacity waits and window start delays, read from the Pending-pod watch.
- ``workloads``: Kueue Workloads' queue waits (quota, admission checks, capacity), read from the
  Workload watch and the Pending-pod watch; ``queue_waits``: one pool's record of them.
- ``columns``: the saved scorecard's building blocks (event lists as JSON columns, wait histograms).
- ``capacity``: the GPUs each pool holds and uses, from kube-state-metrics in Prometheus.
- ``store``: the live scorecards on disk (``scorecard.json`` in the state directory).
"""
