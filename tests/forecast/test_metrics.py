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
