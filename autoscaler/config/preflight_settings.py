"""The ``preflight`` section of the settings."""

from __future__ import annotations

from pydantic import BaseModel, Field

from autoscaler.config.server_settings import STRICT


class PreflightSettings(BaseModel):
    """``gpu-autoscaler preflight``, and the same checks when ``serve`` starts (README, "Coexisting
    with KEDA or prometheus-adapter")."""

    model_config = STRICT

    # serve runs the checks first and refuses to start while one fails (serve --skip-preflight).
    on_start: bool = True
    # The Service in front of this service (manifests/base): an APIService naming it is ours.
    service_namespace: str = Field(default="gpu-autoscaler", min_length=1)
    service_name: str = Field(default="gpu-autoscaler", min_length=1)
    # The APIService v1beta1.external.metrics.k8s.io is to be this service's: another owner is a
    # problem that stops serve. Only manifests/overlays/external-metrics-api sets it: by default the
    # service never counts on owning the one external metrics provider slot (KEDA's, for one).
    claim_apiservice: bool = False
    # Accept replacing another owner's APIService (serve --take-over, preflight --take-over).
    take_over: bool = False
