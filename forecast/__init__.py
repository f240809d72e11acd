"""Pure, synchronous forecasting numerics. Never imports aiohttp, adapters or autoscaler.

Modules, one concept each:

- ``types``: the ``Forecast`` every model returns; ``ProgressCallback`` for long runs.
- ``history``: validation of an input series into a regular ``History`` (gaps kept as NaN).
- ``base``: the estimator contract and conformal calibration shared by every model; fitted models
  also forecast from newer data (``forecast_from``).
- ``baselines``, ``smoothing``, ``mstl``, ``gbm``: the models; ``registry`` names them; ``trees``
  predicts gbm's few refresh rows without sklearn's per-call cost.
- ``ensemble``: quantile averages of the best models, and which models are close enough to the best
  to join them (the confidence set).
- ``engine``: ``fit_select_predict``, the entry point for the service's process pool; its result's
  ``Selection`` forecasts from newer data; ``fit_select_many`` serves several policy quantiles.
- ``metrics``, ``backtest``: accuracy measures and the rolling-origin backtest report.
- ``known_demand``: scheduled windows on top of a forecast; known jobs out of history.
- ``io``: CSV input for the backtest command; ``durations``: ``5m``-style durations, one meaning
  for the whole project (settings, the inspection API, every command).
"""
