"""Selection hysteresis on real data: the incumbent is kept within the switch margin, replaced beyond it."""

from __future__ import annotations

import pandas as pd
import pytest

from forecast.engine import fit_select_predict

CANDIDATES = ("naive", "naive_empirical", "seasonal_naive", "ets")


def _select(series: pd.Series, **overrides: object) -> tuple[str, dict[str, dict[str, float]], tuple[str, ...]]:
    result = fit_select_predict(
        series,
        horizon_steps=12,
        quantiles=(0.9,),
        policy_quantile=0.9,
        lead_steps=12,
        candidates=CANDIDATES,
        **overrides,  # type: ignore[arg-type]
    )
    return result.model, result.scores, result.notes


def test_incumbent_kept_within_the_margin_and_replaced_beyond(helios_10d: pd.Series) -> None:
    challenger, scores, _ = _select(helios_10d)
    singles = [name for name in CANDIDATES if name in scores and name not in challenger]
    assert singles, "every candidate joined the selection: nothing to hold as incumbent"
    incumbent = max(singles, key=lambda name: scores[name]["pinball"])
    gap = 1.0 - scores[challenger]["pinball"] / scores[incumbent]["pinball"]
    assert 0.0 < gap < 0.9

    kept, _, notes = _select(helios_10d, incumbent=incumbent, switch_margin=gap + 0.01)
    assert kept == incumbent
    assert any(note.startswith(f"kept {incumbent}:") for note in notes)

    replaced, _, notes = _select(helios_10d, incumbent=incumbent, switch_margin=gap - 0.01)
    assert replaced == challenger
    assert any(note.startswith(f"{challenger} replaced {incumbent}:") for note in notes)


def test_ensemble_incumbent_is_scored_from_its_members(helios_10d: pd.Series) -> None:
    incumbent = "ensemble(naive+seasonal_naive)"
    assert _select(helios_10d)[0] != incumbent  # not what selection alone chooses
    model, scores, _ = _select(helios_10d, incumbent=incumbent, switch_margin=0.99)
    assert model == incumbent
    assert scores[incumbent]["pinball"] > 0


def test_switch_margin_must_be_a_fraction(helios_10d: pd.Series) -> None:
    with pytest.raises(ValueError, match="switch_margin"):
        _select(helios_10d, incumbent="naive", switch_margin=1.5)
