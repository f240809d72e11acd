"""Accuracy metrics; every function ignores pairs where the actual or the forecast is NaN."""

from __future__ import annotations

import math

import numpy as np
from sklearn.metrics import mean_pinball_loss


def _pairs(actual: np.ndarray, forecast: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    actual = np.asarray(actual, dtype=np.float64)
    forecast = np.asarray(forecast, dtype=np.float64)
    keep = ~(np.isnan(actual) | np.isnan(forecast))
    return actual[keep], forecast[keep]


def mae(actual: np.ndarray, forecast: np.ndarray) -> float:
    a, f = _pairs(actual, forecast)
    return float(np.mean(np.abs(a - f))) if len(a) else float("nan")


def seasonal_naive_scale(history: np.ndarray, period: int) -> float:
    """In-sample MAE of the seasonal-naive forecast (``y[t] - y[t - period]``): the MASE scale."""
    history = np.asarray(history, dtype=np.float64)
    if len(history) <= period:
        return float("nan")
    return mae(history[period:], history[:-period])


def mase(actual: np.ndarray, forecast: np.ndarray, scale: np.ndarray | float) -> float:
    """Mean absolute error scaled per point (``scale`` may vary by origin); zero scales are skipped."""
    actual = np.asarray(actual, dtype=np.float64)
    scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), actual.shape)
    usable = scale > 0
    return mae(actual[usable] / scale[usable], np.asarray(forecast, dtype=np.float64)[usable] / scale[usable])


def pinball(actual: np.ndarray, quantile_forecast: np.ndarray, level: float) -> float:
    """Mean quantile (pinball) loss at ``level`` (scikit-learn's); NaN without a pair, and infinite
    when a value is (a diverged forecast then ranks last, where scikit-learn would refuse it)."""
    a, f = _pairs(actual, quantile_forecast)
    if not len(a):
        return float("nan")
    if not (np.isfinite(a).all() and np.isfinite(f).all()):
        return math.inf
    return float(mean_pinball_loss(a, f, alpha=level))


def coverage(actual: np.ndarray, upper: np.ndarray) -> float:
    """Share of points at or below the upper quantile."""
    a, f = _pairs(actual, upper)
    return float(np.mean(a <= f)) if len(a) else float("nan")


def under_provision_rate(actual: np.ndarray, upper: np.ndarray) -> float:
    """Share of points where the served upper value is below the actual demand."""
    a, f = _pairs(actual, upper)
    return float(np.mean(f < a)) if len(a) else float("nan")
