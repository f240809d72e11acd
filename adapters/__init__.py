"""I/O with the outside world: Prometheus, the Kubernetes API and trace files.

- ``prometheus``: range queries and the signals made from them (its ``__init__`` maps it).
- ``kubernetes``: the API client, watches and each resource read or written (its ``__init__`` maps it).
- ``traces``: trace files replayed as live signals.
- ``types``: typed values the adapters hand to the rest of the service (signals, windows, errors).
- ``gpu_units``: which resources are GPUs, and how many physical GPUs one unit of each stands for.

The three rooms are independent of each other (``lint-imports``); they share only ``types`` and ``gpu_units``.
"""
