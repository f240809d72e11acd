"""Settings of the Prometheus the history comes from: where it is, how to authenticate, how long and how
much an answer may take (docs/hostile-input.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from autoscaler.config.server_settings import STRICT, Duration
from autoscaler.quantity import Count


class PrometheusSettings(BaseModel):
    """Where the history comes from; the fields of managed Prometheus services are all here."""

    model_config = STRICT

    url: str
    # For each request, the whole answer included; a 30-day query on a modest cluster takes about a minute.
    timeout: Duration = timedelta(seconds=120)
    retries: Count = Field(default=3, ge=0, le=20)
    backoff_initial: Duration = timedelta(milliseconds=500)
    backoff_max: Duration = timedelta(seconds=10)
    bearer_token_file: Path | None = None
    basic_auth_username: str | None = None
    basic_auth_password_file: Path | None = None
    ca_file: Path | None = None
    insecure_skip_verify: bool = False
    headers: dict[str, str] = {}
    max_workers: Count = Field(default=4, ge=1, le=64)  # requests in flight to this Prometheus at once
    # Bounds on what an answer may take (docs/hostile-input.md): decompressed bytes per query, over all
    # its requests, and series per answer; over them the answer is cut there and the pull fails.
    max_answer_bytes: Count = Field(default=64 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    max_series: Count = Field(default=10_000, ge=1, le=1_000_000)
    # Long ranges are asked for in requests of at most this span, run max_workers at a time.
    chunk: Duration = timedelta(days=1)

    @model_validator(mode="after")
    def _consistent(self) -> PrometheusSettings:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        if (self.basic_auth_username is None) != (self.basic_auth_password_file is None):
            raise ValueError("basic_auth_username and basic_auth_password_file must be given together")
        if self.bearer_token_file is not None and self.basic_auth_username is not None:
            raise ValueError("set bearer_token_file or basic auth, not both")
        if self.backoff_max < self.backoff_initial:
            raise ValueError("backoff_max must not be below backoff_initial")
        return self
