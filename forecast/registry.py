"""Model names and how to build each model with the engine's settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from forecast.base import CalibratedModel
from forecast.baselines import Naive, NaiveEmpirical, SeasonalNaive, SeasonalNaiveWeekly
from forecast.gbm import GradientBoostedQuantile
from forecast.mstl import MSTLModel
from forecast.smoothing import ExponentialSmoothingModel, HoltWinters

MODELS: dict[str, type[CalibratedModel]] = {
    model.name: model
    for model in (
        Naive,
        SeasonalNaive,
        SeasonalNaiveWeekly,
        NaiveEmpirical,
        ExponentialSmoothingModel,
        HoltWinters,
        MSTLModel,
        GradientBoostedQuantile,
    )
}
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)

ModelFactory = Callable[..., CalibratedModel]


def make_model(name: str, *, max_horizon: int, quantiles: Sequence[float] = (), seed: int = 0) -> CalibratedModel:
    """A fresh, unfitted model; quantile models are trained for ``quantiles``."""
    try:
        model_class = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}") from None
    if model_class is GradientBoostedQuantile:
        return GradientBoostedQuantile(levels=(0.5, *quantiles), max_horizon=max_horizon, seed=seed)
    return model_class(max_horizon=max_horizon, seed=seed)
