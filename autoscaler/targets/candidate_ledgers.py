"""A candidate's replayed minutes as a target's choice reads them, kept compactly between choices and
sent compactly from the worker that replays them.

A choice reads, per minute, the GPU-seconds short (whether a minute was short, how much, and from
when on a window's pods waited) and the GPU-seconds held (the cost): not the GPUs used. Most minutes
have nothing short, and the GPUs held change only when a node launches or goes, so a candidate keeps
the minutes with something short and the minutes where its held GPU-seconds change, with their
values: exactly the per-minute values (each array is rebuilt bit for bit), at about a twentieth of
the dense ledger's bytes on the Helios week (benchmarks/bench_service_levels.py). The minutes'
start times are one array that every candidate replayed together refers to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from autoscaler.scorecard.figures import MinuteLedger


class ShortAndHeld(Protocol):
    """What a choice reads of a ledger (a :class:`MinuteLedger` or a :class:`CandidateLedger`)."""

    @property
    def starts(self) -> np.ndarray: ...

    @property
    def short_gpu_seconds(self) -> np.ndarray: ...

    @property
    def held_gpu_seconds(self) -> np.ndarray: ...


@dataclass(frozen=True)
class CandidateLedger:
    """One candidate's short and held GPU-seconds per minute starting at ``starts``: the minutes with
    any GPU-seconds short (positions and values), and the minutes where the held GPU-seconds change
    (positions, the first minute's included, and the value from each on)."""

    starts: np.ndarray
    short_at: np.ndarray
    short_values: np.ndarray
    held_from: np.ndarray
    held_values: np.ndarray

    @staticmethod
    def of(starts: np.ndarray, short_gpu_seconds: np.ndarray, held_gpu_seconds: np.ndarray) -> CandidateLedger:
        """The compact form of these per-minute arrays (``starts`` is referred to, not copied)."""
        if not len(starts) == len(short_gpu_seconds) == len(held_gpu_seconds):
            raise ValueError("ledger arrays differ in length")
        short_at = np.flatnonzero(short_gpu_seconds).astype(np.int32)
        held_from = np.flatnonzero(np.diff(held_gpu_seconds, prepend=np.nan) != 0).astype(np.int32)
        return CandidateLedger(
            starts, short_at, short_gpu_seconds[short_at].copy(), held_from, held_gpu_seconds[held_from].copy()
        )

    @staticmethod
    def of_ledger(ledger: MinuteLedger, starts: np.ndarray | None = None) -> CandidateLedger:
        """``ledger`` without its GPUs used; ``starts``: the same times as the ledger's, shared."""
        shared = ledger.starts if starts is None else starts
        return CandidateLedger.of(shared, ledger.short_gpu_seconds, ledger.held_gpu_seconds)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def short_gpu_seconds(self) -> np.ndarray:
        short = np.zeros(len(self.starts))
        short[self.short_at] = self.short_values
        return short

    @property
    def held_gpu_seconds(self) -> np.ndarray:
        runs = np.diff(np.append(self.held_from, len(self.starts)))
        return np.repeat(self.held_values, runs)

    def then(self, later: CandidateLedger, starts: np.ndarray, dropped: int) -> CandidateLedger:
        """This ledger's minutes and then ``later``'s, the first ``dropped`` of them left out; ``starts``
        are the minutes that remain (shared). Neither is rebuilt minute by minute."""
        length = len(self)
        short_at = np.concatenate([self.short_at, later.short_at + length])
        short_values = np.concatenate([self.short_values, later.short_values])
        held_from = np.concatenate([self.held_from, later.held_from + length])
        held_values = np.concatenate([self.held_values, later.held_values])
        if len(starts) != length + len(later) - dropped:
            raise ValueError("the minutes kept are not those of both ledgers past the dropped ones")
        kept = short_at >= dropped
        short_at, short_values = short_at[kept] - dropped, short_values[kept]
        if not len(starts):
            held_from, held_values = held_from[:0], held_values[:0]
        else:  # the run the first minute kept falls in starts it
            first = int(np.searchsorted(held_from, dropped, side="right")) - 1
            held_from, held_values = held_from[first:] - dropped, held_values[first:]
            held_from[0] = 0
        return CandidateLedger(starts, short_at.astype(np.int32), short_values, held_from.astype(np.int32), held_values)
