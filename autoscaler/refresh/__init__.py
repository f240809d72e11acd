"""A refresh: pull the signals, fit and forecast in worker processes, decide, and swap in a new snapshot.

- ``pipeline``: what the service serves and where its inputs come from, assembled from the settings.
- ``sources``: Prometheus signal sources with their history kept in memory; ``known_series``: the
  pools a count of GPUs has, and the zeros it holds while their exporter is alive.
- ``kube_inputs``: what the Kubernetes API tells (CronJob windows, NodeClaim lead times, GPU limits,
  the NodePools pods land in, Pending pods' GPUs), one watch per resource kind.
- ``claimed_demand``: the GPUs DRA claims use, recorded from the claim watch and added to the GPU
  demand history (kube-state-metrics exports none).
- ``demo``: the embedded demo's inputs, replayed from public traces (no cluster, no Prometheus);
  ``demo_cluster``: its node pool, the served headroom replayed through the simulator's controller
  model, which the live scorecard scores.
- ``refresher``: the loop: pull -> forecast -> decide (``autoscaler.policy``) -> new snapshot.
- ``schedule``: which work each series gets (select, refit, update); ``fit_groups``: the order series
  are fitted in and the groups (shards) served as soon as they are done.
- ``fitting``: the worker-process side: fit, refit or forecast one series and keep its models.
- ``workers``: the process pools fits run in, and the deadline a fit runs under.
"""
