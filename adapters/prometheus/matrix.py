"""Decoding a range query's ``data.result`` (a matrix) as Prometheus writes it, strictly.

A sample is ``[timestamp, "value"]``: the timestamp a JSON number of seconds, the value a string, as
Prometheus formats a float (Go's ``strconv.FormatFloat(v, 'f', -1, 64)``: plain decimal digits) or
``NaN``, ``+Inf``, ``-Inf``. NaN and the infinities are values of PromQL's data model (a division by
zero) and become gaps later (``promql.to_signals``), never served. Anything else, which Python's
``float`` would read (``1_000``, ``infinity``, `` 12 ``, other scripts' digits) or a subnormal
(below 2.2e-308), is not something Prometheus writes: the whole answer is refused with a
:class:`MatrixError` naming the series and the sample.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from adapters.prometheus.promql import RawSeries

_VALUE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NaN|[+-]Inf")
_SHOWN = 200  # characters of a series' labels or a sample shown in a message


class MatrixError(ValueError):
    """A matrix Prometheus would not write; the message names the series and the sample."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def series_name(labels: dict[str, str]) -> str:
    """``name{label="value", ...}`` as Prometheus shows a series, cut to a readable length."""
    inner = ", ".join(f'{key}="{value}"' for key, value in sorted(labels.items()) if key != "__name__")
    text = f"{labels.get('__name__', '')}{{{inner}}}"
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _decode_samples(series: str, values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    try:
        samples = np.array(values, dtype=object).reshape(len(values), 2) if values else np.empty((0, 2), object)
    except ValueError:
        raise MatrixError(f"series {series}: a sample is not a [timestamp, value] pair") from None
    stamps, texts = samples[:, 0], samples[:, 1]
    if not set(map(type, stamps)) <= {int, float}:
        bad = next(stamp for stamp in stamps if type(stamp) not in (int, float))
        raise MatrixError(f"series {series}: sample timestamp {_shown(bad)} is not a JSON number")
    if not set(map(type, texts)) <= {str} or not all(map(_VALUE.fullmatch, texts)):
        bad = next(text for text in texts if not isinstance(text, str) or not _VALUE.fullmatch(text))
        raise MatrixError(f"series {series}: sample value {_shown(bad)} is not a number as Prometheus writes one")
    timestamps = stamps.astype(np.float64)
    numbers = texts.astype(np.float64)
    if not np.isfinite(timestamps).all():
        raise MatrixError(f"series {series}: a sample timestamp is not finite")
    subnormal = (numbers != 0) & (np.abs(numbers) < np.finfo(np.float64).tiny)
    if subnormal.any():
        bad = texts[int(np.flatnonzero(subnormal)[0])]
        raise MatrixError(f"series {series}: sample value {_shown(bad)} is subnormal, not a value Prometheus computes")
    return timestamps, numbers


def decode_matrix(result: Any) -> list[RawSeries]:
    """Validate the ``data.result`` of a range query and decode its samples (module docstring)."""
    if not isinstance(result, list):
        raise MatrixError(f"expected a matrix result, got {type(result).__name__}")
    decoded: list[RawSeries] = []
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise MatrixError("matrix entry without a metric object")
        labels = {str(key): str(value) for key, value in item["metric"].items()}
        values = item.get("values", [])  # a series with only native histograms has no float samples
        if not isinstance(values, list):
            raise MatrixError(f"series {series_name(labels)}: its values are not a list")
        timestamps, numbers = _decode_samples(series_name(labels), values)
        decoded.append(RawSeries(labels=labels, timestamps=timestamps, values=numbers))
    return decoded
