"""Which series a count of GPUs has, and the zeros it holds while its exporter is alive.

``sum by (nodepool) (...)`` returns no series for a pool with no GPU pods, the normal state between
training windows; taken as a gap, the pool would keep its last demand for ever. So a series that is
*known* is 0, not a gap, at every point where its exporter was alive, and a gap where the exporter
was down: nothing becomes 0 because a backend failed.

Known: a series with a point in the history kept (the lookback), the whole-signal series of an
unsplit signal, and for a signal split by ``nodepool`` alone every pool a node carries the label of,
or that another source names (a Karpenter NodePool watch, say). A pool that is none of these has
disappeared and is no longer served.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from adapters.types import NODEPOOL_LABEL, Signal

Identity = tuple[tuple[str, str], ...]


def identity(labels: Mapping[str, str]) -> Identity:
    return tuple(sorted(labels.items()))


def known_identities(split_by: Sequence[str], history: Sequence[Signal], pools: Iterable[str]) -> set[Identity]:
    """The series a signal split ``by`` these labels has, given its history and the known pools."""
    known = {identity(signal.labels) for signal in history}
    if not split_by:
        known.add(())
    if tuple(split_by) == (NODEPOOL_LABEL,):
        known |= {((NODEPOOL_LABEL, pool),) for pool in pools}
    return known


def newest_pools(pools: Sequence[Signal]) -> set[str]:
    """The pools present at the newest point of a pools query's history (all end there when merged)."""
    return {
        signal.labels.get(NODEPOOL_LABEL, "")
        for signal in pools
        if len(signal.series) and not np.isnan(signal.series.iloc[-1])
    } - {""}


def alive_points(liveness: Sequence[Signal]) -> pd.Series:
    """True at the points where the liveness query had a series (its history, one Signal or none)."""
    if not liveness:
        return pd.Series(dtype=bool, index=pd.DatetimeIndex([], tz="UTC"))
    series = liveness[0].series
    return series.notna() & (series > 0)


def fill_absent(
    name: str,
    history: Sequence[Signal],
    alive: pd.Series,
    known: Iterable[Identity],
    step: pd.Timedelta,
    label_offset: pd.Timedelta,
) -> list[Signal]:
    """One Signal per known identity, from the first point of ``history`` or ``alive`` to the last of
    ``alive``: the history's value where it has one, else 0 where the exporter was alive, else a gap."""
    starts = [signal.series.index[0] for signal in history if len(signal.series)] + list(alive.index[:1])
    if not len(alive) or not starts:
        return []
    grid = pd.date_range(min(starts), alive.index[-1], freq=step)
    alive_on_grid = alive.reindex(grid, fill_value=False).to_numpy(dtype=bool)
    by_identity = {identity(signal.labels): signal for signal in history}
    filled: list[Signal] = []
    for key in sorted(known):
        observed = by_identity[key].series.reindex(grid) if key in by_identity else pd.Series(np.nan, index=grid)
        values = np.where(observed.isna().to_numpy() & alive_on_grid, 0.0, observed.to_numpy(dtype=np.float64))
        series = pd.Series(values, index=grid, name=name, dtype=np.float64)
        filled.append(Signal(name, dict(key), series, step, label_offset))
    return filled
