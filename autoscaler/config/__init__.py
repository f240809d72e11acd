"""The settings: one YAML file, validated at start-up, one module per section that needs its own.

- ``settings_loader``: reading the file, environment overrides, and errors that name each field.
- ``settings``: the whole settings model: signals, metrics, windows, Kubernetes inputs and the sections below.
- ``server_settings``: the ``server`` section (ports, TLS, parser limits, shutdown timing) and the
  shared field types (strict models, durations, Lease timings).
- ``actuator_settings``: ``actuators``: what the service writes to the cluster itself (CapacityBuffers).
- ``publication_settings``: ``publication``: forecasts published as GPUForecast objects, and shards.
- ``target_settings``: a headroom metric's service-level target, as the file states it.
- ``gpu_unit_settings``: the GPU units Pending pods and CronJob windows count in, and the DeviceClasses
  their DRA claims count by.
- ``preflight_settings``: ``preflight``.
- ``launch_settings``: the launch record (``adapters.kubernetes.launch_record``).
"""
