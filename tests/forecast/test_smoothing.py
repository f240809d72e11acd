"""Exponential smoothing models on histories that trip statsmodels' arithmetic."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from forecast.registry import make_model


@pytest.mark.parametrize("name", ["ets", "holt_winters"])
def test_a_history_fitted_exactly_raises_no_warning(name):
    # An idle pool (0 GPUs for days) is fitted with zero error; statsmodels' log(SSE) must stay quiet.
    idle = pd.Series(np.zeros(288 * 6), index=pd.date_range("2026-01-01", periods=288 * 6, freq="5min", tz="UTC"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        forecast = make_model(name, max_horizon=3).fit(idle).predict(3, (0.9,))
    assert list(forecast.mean) == [0.0, 0.0, 0.0]
