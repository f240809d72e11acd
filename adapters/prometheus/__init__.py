"""Prometheus: range queries and the signals made from them.

- ``client``: range queries off the event loop: settings, retries, backfill in chunks, incremental pulls.
- ``answer``: one answer read within bounds (bytes, series, nesting, time) as it streams in.
- ``errors``: what can go wrong, as exceptions callers tell apart (unreachable, timed out, too large).
- ``matrix``: decoding a range query's result (a matrix) as Prometheus writes it, strictly.
- ``promql``: range results as Signals on a regular step grid: queries, grid arithmetic, merging.
- ``presets``: shipped signal queries for the exporters a GPU cluster already runs.
"""
