"""A range query's matrix as Prometheus writes it: anything else is refused naming the series."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from adapters.prometheus.matrix import MatrixError, decode_matrix

T = 1_795_680_000.0
POOL = {"__name__": "gpus", "pool": "a100", "namespace": "ml"}
SERIES = 'gpus{namespace="ml", pool="a100"}'


def matrix(*samples: Any) -> list[dict[str, Any]]:
    return [{"metric": {"pool": "other"}, "values": [[T, "1"]]}, {"metric": POOL, "values": list(samples)}]


def test_prometheus_number_forms_are_read_and_nan_and_infinities_kept_for_gaps():
    texts = ["3", "-0.25", "1e+21", "1.5E-7", "NaN", "+Inf", "-Inf", "0"]
    (_, series) = decode_matrix(matrix(*([T + 60 * index, text] for index, text in enumerate(texts))))
    assert series.labels == POOL
    assert series.timestamps.tolist() == [T + 60 * index for index in range(len(texts))]
    assert series.values[:4].tolist() == [3.0, -0.25, 1e21, 1.5e-7]
    assert math.isnan(series.values[4]) and series.values[5:7].tolist() == [math.inf, -math.inf]


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ([T, "1_000"], f"series {SERIES}: sample value '1_000' is not a number as Prometheus writes one"),
        ([T, "infinity"], f"series {SERIES}: sample value 'infinity' is not a number as Prometheus writes one"),
        ([T, "nan"], f"series {SERIES}: sample value 'nan' is not a number as Prometheus writes one"),
        ([T, " 12 "], f"series {SERIES}: sample value ' 12 ' is not a number as Prometheus writes one"),
        ([T, "\u0661\u0662"], f"series {SERIES}: sample value '\u0661\u0662' is not a number as Prometheus writes one"),
        ([T, 12], f"series {SERIES}: sample value 12 is not a number as Prometheus writes one"),
        ([T, None], f"series {SERIES}: sample value None is not a number as Prometheus writes one"),
        ([T, "1e-320"], f"series {SERIES}: sample value '1e-320' is subnormal, not a value Prometheus computes"),
        (["1795680000", "1"], f"series {SERIES}: sample timestamp '1795680000' is not a JSON number"),
        ([True, "1"], f"series {SERIES}: sample timestamp True is not a JSON number"),
        ([T, "1", "2"], f"series {SERIES}: a sample is not a [timestamp, value] pair"),
    ],
)
def test_anything_else_is_refused_naming_the_series_and_the_sample(sample, message):
    with pytest.raises(MatrixError) as raised:
        decode_matrix(matrix([T - 60, "2"], sample))
    assert str(raised.value) == message


def test_a_long_value_or_label_set_is_cut_in_the_message():
    labels = {"pool": "p" * 1000}
    with pytest.raises(MatrixError) as raised:
        decode_matrix([{"metric": labels, "values": [[T, "x" * 10_000]]}])
    series, value = str(raised.value).removeprefix("series ").split(": sample value ")
    assert len(series) == 200 and series.endswith("...")
    assert value == repr("x" * 10_000)[:197] + "... is not a number as Prometheus writes one"


def test_no_samples_is_an_empty_series():
    (series,) = decode_matrix([{"metric": POOL}])
    assert series.timestamps.dtype == np.float64 and len(series.values) == 0
