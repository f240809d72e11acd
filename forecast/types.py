"""The types shared across forecasting: the ``Forecast`` every model returns, and the
``ProgressCallback`` that long runs (backtests, simulations) report through."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

ProgressCallback = Callable[[int, int], None]
"""``(done, total)`` progress reports of long runs: ``done`` of ``total`` units of work (origins, jobs)."""


@dataclass(frozen=True)
class Forecast:
    """A forecast over future steps: the mean and one array per quantile level.

    ``timestamps`` are the (UTC) times the values apply to, one per step after the last
    observation. Quantile arrays have the same length as ``mean``; an upper quantile is never
    below the mean (models enforce this, :meth:`validate` checks it).
    """

    model: str
    timestamps: pd.DatetimeIndex
    mean: np.ndarray
    quantiles: Mapping[float, np.ndarray] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def quantile(self, level: float) -> np.ndarray:
        """The forecast at ``level``; the mean for 0.5 when no median was asked for."""
        if level in self.quantiles:
            return self.quantiles[level]
        raise KeyError(f"quantile {level} was not forecast (have {sorted(self.quantiles)})")

    def validate(self) -> Forecast:
        n = len(self.timestamps)
        if self.mean.shape != (n,):
            raise ValueError(f"{self.model}: mean has shape {self.mean.shape}, expected ({n},)")
        for level, values in self.quantiles.items():
            if values.shape != (n,):
                raise ValueError(f"{self.model}: quantile {level} has shape {values.shape}")
            if level >= 0.5 and np.any(values < self.mean - 1e-9):
                raise ValueError(f"{self.model}: quantile {level} falls below the mean")
        return self
