"""One check that two forecasts are the same to the bit: model, timestamps, mean and every quantile."""

from __future__ import annotations

import numpy as np

from forecast.types import Forecast


def assert_same_forecast(first: Forecast, second: Forecast) -> None:
    assert first.model == second.model
    assert first.timestamps.equals(second.timestamps)
    np.testing.assert_array_equal(first.mean, second.mean)
    assert set(first.quantiles) == set(second.quantiles)
    for level in first.quantiles:
        np.testing.assert_array_equal(first.quantile(level), second.quantile(level))
