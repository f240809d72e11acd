"""Shared fixtures: shortened real series from the public traces (tests/data_helpers.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests import data_helpers

STEPS_PER_DAY = 288


def _require_data() -> None:
    if not data_helpers.data_available():
        pytest.skip(f"public traces not found under {data_helpers.DATA_DIR}")


@pytest.fixture(scope="session")
def helios_10d() -> pd.Series:
    """Ten days of Helios Earth running GPUs at 5-minute steps (enough for every model)."""
    _require_data()
    return data_helpers.trace("helios_running_gpus").iloc[-10 * STEPS_PER_DAY :]


@pytest.fixture(scope="session")
def lora_trace() -> pd.Series:
    """GenAI LoRA requests per minute at 5-minute steps: a clear daily cycle."""
    _require_data()
    return data_helpers.trace("genai_lora_requests_per_min")
