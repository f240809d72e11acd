"""The ``publication`` section of the settings: forecasts published as GPUForecast objects."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from autoscaler.server_settings import STRICT


class PublicationSettings(BaseModel):
    """Forecasts published as GPUForecast objects (docs/high-availability.md)."""

    model_config = STRICT

    enabled: bool = False
    # Where the objects live: the service's own namespace (the Role in manifests/base grants it).
    namespace: str = Field(default="gpu-autoscaler", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    # Series are hashed into this many objects; 16 keeps 1,000 series to 16 writes a refresh, at most
    # about 100 KiB an object (measured: docs/high-availability.md). Changing it starts new objects.
    shards: int = Field(default=16, ge=1, le=4096)
    # What the APIs serve: this replica's own refreshes (local) or the published objects (objects),
    # so that every replica gives one answer.
    serve_from: Literal["local", "objects"] = "local"
    # Whether this replica writes the objects. Until shards are owned through Leases (the next step in
    # docs/high-availability.md) exactly one replica should publish; the others set false and read.
    publish: bool = True
    # Attempts of one object's update when it meets 409 Conflicts (each after a fresh read).
    write_attempts: int = Field(default=3, ge=1, le=10)
