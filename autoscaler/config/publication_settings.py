"""The ``publication`` section of the settings: forecasts published as GPUForecast objects."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from autoscaler.config.server_settings import STRICT, Duration, LeaseTimings
from autoscaler.quantity import Count


class ShardingSettings(LeaseTimings):
    """Shards owned through Leases (docs/high-availability.md, "Ownership"): each replica fits,
    publishes and acts on the shards whose Lease it holds; all replicas serve every shard."""

    model_config = STRICT

    enabled: bool = False
    # Leases are named <prefix>-shard-<i>-of-<shards> and <prefix>-member-<identity>, in
    # publication.namespace.
    lease_prefix: str = Field(default="gpu-autoscaler", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    # lease_duration, renew_deadline, retry_period: LeaseTimings (client-go's 15 s / 10 s / 2 s).
    # A membership Lease seen unchanged this long (its pod was killed, or its node lost) is deleted by
    # a live replica, so that `kubectl get leases` lists only replicas that may still come back.
    forget_members_after: Duration = timedelta(minutes=10)
    # Keep fitted, in the workers, the models other replicas publish for their shards, so that a
    # takeover forecasts at once instead of refitting (docs/high-availability.md, "Standby models").
    # Costs one refit a series per reselect_every and the memory of every series' models.
    standby_models: bool = True

    @model_validator(mode="after")
    def _forget_after_expiry(self) -> ShardingSettings:
        if self.forget_members_after <= self.lease_duration:
            raise ValueError(
                f"forget_members_after ({self.forget_members_after}) must exceed lease_duration "
                f"({self.lease_duration}): a live replica's Lease would be deleted"
            )
        return self


class PublicationSettings(BaseModel):
    """Forecasts published as GPUForecast objects (docs/high-availability.md)."""

    model_config = STRICT

    enabled: bool = False
    # Where the objects live: the service's own namespace (the Role in manifests/base grants it).
    namespace: str = Field(default="gpu-autoscaler", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    # Series are hashed into this many objects; 16 keeps 1,000 series to 16 writes a refresh, at most
    # about 100 KiB an object (measured: docs/high-availability.md). Changing it starts new objects.
    shards: Count = Field(default=16, ge=1, le=4096)
    # What the APIs serve: this replica's own refreshes (local) or the published objects (objects),
    # so that every replica gives one answer.
    serve_from: Literal["local", "objects"] = "local"
    # Whether this replica writes the objects. Without sharding exactly one replica should publish; the
    # others set false and read. With sharding every replica publishes the shards it owns.
    publish: bool = True
    # Attempts of one object's update when it meets 409 Conflicts (each after a fresh read).
    write_attempts: Count = Field(default=3, ge=1, le=10)
    sharding: ShardingSettings = ShardingSettings()

    @model_validator(mode="after")
    def _sharding_serves_from_the_objects(self) -> PublicationSettings:
        if self.sharding.enabled and not (self.enabled and self.serve_from == "objects" and self.publish):
            raise ValueError(
                "publication.sharding needs publication.enabled: true, serve_from: objects and publish: true "
                "(every replica serves every shard from the objects and publishes the shards it owns)"
            )
        return self
