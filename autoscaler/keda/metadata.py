"""What a KEDA trigger asks for: its ``scalerMetadata`` map read into a :class:`Trigger`.

KEDA passes every key of the ScaledObject trigger's ``metadata`` (``scalerAddress`` too, and any
key meant for someone else), so keys this scaler does not know are ignored, except a known key in
the wrong case (``labelselector``): that is a typo that would silently serve something else.

A map is bounded before anything else is read from it (:data:`MAX_KEYS`, :data:`MAX_BYTES`), so one
call's work is bounded whatever a caller sends; a real trigger has a handful of short keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.echoes import echo
from autoscaler.quantity import parse_decimal
from autoscaler.selectors import Selector, SelectorError, parse_selector

METRIC = "metric"
LABEL_SELECTOR = "labelSelector"
TARGET_VALUE = "targetValue"
ACTIVATION_VALUE = "activationValue"
KNOWN_KEYS = (METRIC, LABEL_SELECTOR, TARGET_VALUE, ACTIVATION_VALUE)
_KNOWN_BY_LOWER = {known.lower(): known for known in KNOWN_KEYS}

MAX_KEYS = 64
# Keys and values together, UTF-8: room for a label selector at its 16 KiB limit and the rest.
MAX_BYTES = 24 * 1024
# A Kubernetes resource name's limit (DNS subdomain): the external metrics API's path segment.
MAX_METRIC_NAME = 253
# A name refused for its length is quoted this far: the length is the fault, not the characters.
SHOWN_NAME_BYTES = 80


class MetadataError(ValueError):
    """A trigger's metadata that cannot be served; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class TriggerFields:
    """The metadata values a trigger is made of: the key of the trigger cache, not the whole map."""

    metric: str | None
    label_selector: str | None
    target_value: str | None
    activation_value: str | None

    @property
    def size(self) -> int:
        """Characters held, for the cache's byte bound."""
        values = (self.metric, self.label_selector, self.target_value, self.activation_value)
        return sum(len(value) for value in values if value is not None)


@dataclass(frozen=True)
class Trigger:
    """One trigger: which metric, which of its series, and the HPA target and activation threshold."""

    metric: str
    selector: Selector
    target: float
    activation: float


def metric_name_fault(name: str) -> str | None:
    """Why ``name`` cannot be a metric's name (too long), else ``None``."""
    if len(name) <= MAX_METRIC_NAME:
        return None
    return f"the name {echo(name, SHOWN_NAME_BYTES)!r} is {len(name)} characters long; the limit is {MAX_METRIC_NAME}"


def trigger_fields(metadata: Mapping[str, str]) -> TriggerFields:
    """The fields that matter, once the map is within its limits and spells the known keys right."""
    if len(metadata) > MAX_KEYS:
        raise MetadataError("", f"invalid scalerMetadata: {len(metadata)} keys; the limit is {MAX_KEYS}")
    size = sum(len(key.encode()) + len(value.encode()) for key, value in metadata.items())
    if size > MAX_BYTES:
        raise MetadataError("", f"invalid scalerMetadata: {size} bytes of keys and values; the limit is {MAX_BYTES}")
    for key in metadata:
        known = _KNOWN_BY_LOWER.get(key.lower())
        if known is not None and key != known:
            raise MetadataError(key, f"invalid key {echo(key)}: the key is spelled {known}")
    return TriggerFields(
        metric=metadata.get(METRIC),
        label_selector=metadata.get(LABEL_SELECTOR),
        target_value=metadata.get(TARGET_VALUE),
        activation_value=metadata.get(ACTIVATION_VALUE),
    )


def _number(key: str, text: str | None, *, default: float | None, positive: bool) -> float:
    if text is None or not text.strip():
        if default is None:
            raise MetadataError(key, f"missing {key}: the trigger's metadata must give it (a number such as '1')")
        return default
    value = parse_decimal(text.strip())
    if value is None or (positive and value <= 0):
        rule = "a number greater than 0" if positive else "a finite number"
        raise MetadataError(key, f"invalid {key}: must be {rule}, got {echo(text)!r}")
    return value


def parse_fields(fields: TriggerFields) -> Trigger:
    """The trigger ``fields`` describe; raises :class:`MetadataError` naming the key at fault.

    ``metric`` and ``targetValue`` are required; ``labelSelector`` (Kubernetes syntax, parsed and
    refused exactly as the external metrics API does) defaults to every series and
    ``activationValue`` to 0.
    """
    metric = (fields.metric or "").strip()
    if not metric:
        raise MetadataError(METRIC, f"missing {METRIC}: the trigger's metadata must name the metric to serve")
    fault = metric_name_fault(metric)
    if fault is not None:
        raise MetadataError(METRIC, f"invalid {METRIC}: {fault}")
    try:
        selector = parse_selector(fields.label_selector)
    except SelectorError as error:
        raise MetadataError(LABEL_SELECTOR, f"invalid labelSelector: {error}") from None
    target = _number(TARGET_VALUE, fields.target_value, default=None, positive=True)
    activation = _number(ACTIVATION_VALUE, fields.activation_value, default=0.0, positive=False)
    return Trigger(metric=metric, selector=selector, target=target, activation=activation)


def parse_trigger(metadata: Mapping[str, str]) -> Trigger:
    """The trigger a whole metadata map describes (:func:`trigger_fields`, then :func:`parse_fields`)."""
    return parse_fields(trigger_fields(metadata))
