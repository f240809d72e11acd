"""Shared fixtures: shortened real series, committed slices of the public traces (tests/trace_slices.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests import trace_slices

STEPS_PER_DAY = 288


@pytest.fixture(scope="session")
def helios_10d() -> pd.Series:
    """Ten days of Helios Earth running GPUs at 5-minute steps (enough for every model)."""
    return trace_slices.series("helios_running_gpus_5m_last10d")


@pytest.fixture(scope="session")
def lora_trace() -> pd.Series:
    """GenAI LoRA requests per minute at 5-minute steps: a clear daily cycle."""
    return trace_slices.series("genai_lora_requests_per_min_5m")
