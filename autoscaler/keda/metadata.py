"""What a KEDA trigger asks for: its ``scalerMetadata`` map read into a :class:`Trigger`.

KEDA passes every key of the ScaledObject trigger's ``metadata`` (``scalerAddress`` too, and any
key meant for someone else), so keys this scaler does not know are ignored, except a known key in
the wrong case (``labelselector``): that is a typo that would silently serve something else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.selectors import Selector, SelectorError, parse_selector

METRIC = "metric"
LABEL_SELECTOR = "labelSelector"
TARGET_VALUE = "targetValue"
ACTIVATION_VALUE = "activationValue"
KNOWN_KEYS = (METRIC, LABEL_SELECTOR, TARGET_VALUE, ACTIVATION_VALUE)


class MetadataError(ValueError):
    """A trigger's metadata that cannot be served; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Trigger:
    """One trigger: which metric, which of its series, and the HPA target and activation threshold."""

    metric: str
    selector: Selector
    target: float
    activation: float


def _number(metadata: Mapping[str, str], key: str, *, default: float | None, positive: bool) -> float:
    text = metadata.get(key)
    if text is None or not text.strip():
        if default is None:
            raise MetadataError(key, f"missing {key}: the trigger's metadata must give it (a number such as '1')")
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (positive and value <= 0):
        rule = "a number greater than 0" if positive else "a finite number"
        raise MetadataError(key, f"invalid {key}: must be {rule}, got {text!r}")
    return value


def parse_trigger(metadata: Mapping[str, str]) -> Trigger:
    """The trigger ``metadata`` describes; raises :class:`MetadataError` naming the key at fault.

    ``metric`` and ``targetValue`` are required; ``labelSelector`` (Kubernetes syntax, parsed and
    refused exactly as the external metrics API does) defaults to every series and
    ``activationValue`` to 0.
    """
    for key in metadata:
        for known in KNOWN_KEYS:
            if key != known and key.lower() == known.lower():
                raise MetadataError(key, f"invalid key {key}: the key is spelled {known}")
    metric = (metadata.get(METRIC) or "").strip()
    if not metric:
        raise MetadataError(METRIC, f"missing {METRIC}: the trigger's metadata must name the metric to serve")
    try:
        selector = parse_selector(metadata.get(LABEL_SELECTOR))
    except SelectorError as error:
        raise MetadataError(LABEL_SELECTOR, f"invalid labelSelector: {error}") from None
    target = _number(metadata, TARGET_VALUE, default=None, positive=True)
    activation = _number(metadata, ACTIVATION_VALUE, default=0.0, positive=False)
    return Trigger(metric=metric, selector=selector, target=target, activation=activation)
