"""gpu-autoscaler: predictive GPU autoscaling served on the Kubernetes external metrics API.

The package in layers, outermost first (``lint-imports`` holds them; nothing imports upwards):

- ``commands``: the ``gpu-autoscaler`` command line (``serve``, ``check-config``, ``backtest``,
  ``forecast``, ``simulate``).
- ``app``: the composition root (``factory.create_app`` builds both aiohttp apps, their state and
  the refresher) and the serving process (``serving.serve``: TLS, sockets, signals, shutdown delay, draining).
  ``simulation`` sits beside it: the cluster simulator behind ``simulate``.
- ``keda``: KEDA's external scaler over gRPC (``server.grpc_port``), answered from the same provider.
- ``web``: everything that answers HTTP (external metrics API, inspection API and page, probes,
  self-metrics, authentication, TLS); its own ``__init__`` maps it.
- The core, in rooms (each ``__init__`` maps its modules), outermost first:
  ``replication`` (GPUForecast objects shared by replicas, and shards: high availability) beside
  ``checks`` (``preflight``, and the read-only ``trial`` on a Prometheus); ``refresh`` (the
  ``pipeline`` assembles the sources from the settings or the demo; the ``refresher`` pulls, has
  worker processes fit and forecast, applies the policy and swaps a new snapshot in) beside
  ``actuation`` (the pools' CapacityBuffers, sized from the served values); ``config`` (the settings,
  one module per section); ``targets`` (metric plans, service-level targets and the levels tuned
  to them); ``scorecard`` (outcome figures, live per pool and in the simulator); ``serving`` (the
  snapshot the APIs read, each value's provenance, its copy on disk).
- Shared leaves: ``policy`` (from forecasts to served values: pure functions, used by the refresher
  and the simulator alike), ``selectors`` and ``quantity`` (Kubernetes-syntax building blocks;
  durations are ``forecast.durations``), ``throttled_log`` (log lines at a bounded rate),
  ``state_files`` (versioned JSON in the state directory, written durably, restored with the rules
  every store shares) and ``decimals``.

``forecast`` (pure numerics) and ``adapters`` (I/O) sit below all of it.
"""

__version__ = "0.1.0"
