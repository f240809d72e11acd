"""High availability: replicas share what is served through GPUForecast objects and split the work in
shards (docs/high-availability.md).

- ``shards``: a replica fits, publishes and acts only on the shards whose Lease it holds
  (``adapters.kubernetes.shard_leases``).
- ``publication``: served values (and step-down pacing state) published as GPUForecast objects, and
  served from them by every replica.
- ``forecast_objects``: the format of those objects: what is served, as a GPUForecast holds it, and back.
- ``lead_time_store``: NodeClaim lead-time samples in the state directory, in that format, so that a
  restarted service keeps them even without publication.
"""
