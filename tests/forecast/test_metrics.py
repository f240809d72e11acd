from __future__ import annotations

import numpy as np
import pytest

from forecast import metrics


def test_pinball_penalises_under_forecasts_by_the_level() -> None:
    actual = np.array([10.0, 10.0])
    assert metrics.pinball(actual, np.array([8.0, 8.0]), 0.9) == pytest.approx(1.8)
    assert metrics.pinball(actual, np.array([12.0, 12.0]), 0.9) == pytest.approx(0.2)


def test_coverage_and_under_provision_ignore_nan() -> None:
    actual = np.array([1.0, 2.0, 3.0, np.nan])
    upper = np.array([1.0, 1.0, 5.0, 0.0])
    assert metrics.coverage(actual, upper) == pytest.approx(2 / 3)
    assert metrics.under_provision_rate(actual, upper) == pytest.approx(1 / 3)


def test_mase_scales_by_seasonal_naive_mae() -> None:
    history = np.tile([0.0, 2.0], 10)
    scale = metrics.seasonal_naive_scale(history, 1)
    assert scale == pytest.approx(2.0)
    assert metrics.mase(np.array([4.0]), np.array([3.0]), scale) == pytest.approx(0.5)
    assert metrics.mae(np.array([np.nan]), np.array([1.0])) != metrics.mae(np.array([np.nan]), np.array([1.0]))


def _hand_written_pinball(actual: np.ndarray, forecast: np.ndarray, level: float) -> float:
    """The loss as the project wrote it before it used scikit-learn's: results must not move."""
    keep = ~(np.isnan(actual) | np.isnan(forecast))
    error = actual[keep] - forecast[keep]
    return float(np.mean(np.maximum(level * error, (level - 1.0) * error)))


@pytest.mark.parametrize("level", [0.5, 0.9, 0.99, 0.999])
def test_pinball_is_the_hand_written_loss_to_the_bit(level: float) -> None:
    generator = np.random.default_rng(7)
    actual = generator.gamma(2.0, 30.0, 2000)
    forecast = actual + generator.normal(0.0, 25.0, 2000)
    actual[::97] = np.nan
    forecast[::89] = np.nan
    assert metrics.pinball(actual, forecast, level) == _hand_written_pinball(actual, forecast, level)


def test_pinball_of_a_diverged_forecast_is_infinite_and_of_no_pair_nan() -> None:
    actual = np.array([1.0, 2.0])
    assert metrics.pinball(actual, np.array([1.0, np.inf]), 0.9) == np.inf
    assert np.isnan(metrics.pinball(actual, np.array([np.nan, np.nan]), 0.9))
