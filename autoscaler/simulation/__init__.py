"""A cluster simulator for GPU pre-provisioning (placeholder pods under an HPA, or a CapacityBuffer),
behind ``gpu-autoscaler simulate``.

Modules, one concept each:

- ``inputs``: the workload replayed: a demand CSV (fluid GPUs per step) or a pod trace (the Alibaba
  v2023 pod list, or ``arrival,duration,gpus``), plus the pods of declared ``--schedule`` windows.
- ``hpa``: the HorizontalPodAutoscaler's arithmetic (tolerance, stabilisation, rate limits).
- ``actuation``: how served headroom becomes spare capacity: placeholders under the HPA, or a
  CapacityBuffer's replicas written directly (virtual pods, provisioner triggers).
- ``lead_times``: node lead-time distributions (``fixed``, ``lognormal``, ``uniform``).
- ``provisioner``: a Karpenter-like node pool (batching, launches, empty-node consolidation).
- ``cluster``: who holds the Ready GPUs (real pods first, FIFO with backfill; placeholders preempted,
  virtual pods on what is free).
- ``engine``: the time loop for one policy and its totals.
- ``policies``: policy names, the heuristics and the oracle; ``forecasting``: ``holt_winters`` and
  ``auto:Q`` (the service's own policy) replayed on the service's fit cadence.
- ``runner``: every policy over one workload, optionally in a process pool; ``sweeps``: which settings
  of a heuristic a sweep runs and where it stops; ``report``: JSON, table, pictures.
"""
