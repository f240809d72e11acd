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
- The core, flat: ``pipeline`` assembles, from ``settings`` (its ``server`` section in
  ``server_settings``), the ``sources`` (Prometheus signals, with ``known_series``: the pools a
  count of GPUs has, 0 while their exporter is alive),
  ``kube_inputs`` (CronJob windows, NodeClaim lead times, GPU limits, the NodePool each pod lands
  in, Pending pods' GPUs) or the ``demo``; the ``refresher`` pulls, has ``workers`` fit and
  forecast, applies the ``policy`` and swaps a new snapshot into the ``provider``; ``persistence``
  keeps the last served values across restarts; ``publication`` publishes them (and step-down
  pacing state) as GPUForecast objects and serves what those hold, in the format
  ``forecast_objects`` defines (settings in ``publication_settings``); ``sharding`` (above them)
  makes a replica fit, publish and act only on the shards whose Lease it holds
  (``adapters.kubernetes.shard_leases``). ``actuation`` writes the pools' CapacityBuffers from the served
  values (``buffer_sizing``; settings in ``actuator_settings``; only the Lease holder writes, or
  with sharding the owner of the pool's sizing series). ``fit_schedule`` says which work (select,
  refit, update) each series gets. ``selectors`` and ``quantity`` are the
  Kubernetes-syntax building blocks (durations are ``forecast.durations``).

``forecast`` (pure numerics) and ``adapters`` (I/O) sit below all of it.
"""

__version__ = "0.1.0"
