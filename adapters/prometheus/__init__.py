"""Prometheus: range queries and the signals made from them.

- ``client``: range queries off the event loop: settings, errors, retries, backfill and incremental pulls.
- ``matrix``: decoding a range query's result (a matrix) as Prometheus writes it, strictly.
- ``promql``: range results as Signals on a regular step grid: queries, grid arithmetic, merging.
- ``presets``: shipped signal queries for the exporters a GPU cluster already runs.
"""
