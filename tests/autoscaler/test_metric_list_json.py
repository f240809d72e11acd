"""The metric list is joined from each series' JSON, made once: it must be, byte for byte, what
``json.dumps`` makes of the document (names and labels with quotes, backslashes, non-ASCII)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from autoscaler.serving.provider import ServedSeries
from autoscaler.web.shared.responses import external_metric_value_list, external_metric_value_list_json

NOW = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
texts = st.text(max_size=12)
series_strategy = st.builds(
    ServedSeries,
    metric=st.just("gpu_headroom"),
    labels=st.dictionaries(texts, texts, max_size=3),
    value=st.floats(min_value=-1e9, max_value=1e9, allow_nan=False),
    timestamp=st.integers(0, 10**6).map(lambda seconds: NOW - timedelta(seconds=seconds)),
    window_seconds=st.none() | st.integers(1, 3600),
)


@given(name=texts, series=st.lists(series_strategy, max_size=4))
def test_the_joined_list_is_what_json_dumps_makes_of_the_document(name, series):
    expected = json.dumps(external_metric_value_list(name, series)).encode()
    assert external_metric_value_list_json(name, series) == expected
    assert external_metric_value_list_json(name, series) == expected  # and again, from the kept JSON


def test_an_empty_list_and_one_item_exactly():
    assert json.loads(external_metric_value_list_json("GPU_headroom", [])) == {
        "kind": "ExternalMetricValueList",
        "apiVersion": "external.metrics.k8s.io/v1beta1",
        "metadata": {},
        "items": [],
    }
    one = ServedSeries("gpu_headroom", {"pool": 'a"100'}, 2.5, NOW, window_seconds=60)
    assert json.loads(external_metric_value_list_json("GPU_headroom", [one]))["items"] == [
        {
            "metricName": "GPU_headroom",
            "metricLabels": {"pool": 'a"100'},
            "timestamp": "2026-12-06T10:00:00Z",
            "value": "2500m",
            "window": 60,
        }
    ]
