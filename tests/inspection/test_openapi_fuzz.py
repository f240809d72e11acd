"""Schemathesis fuzzes the running inspection API from its own /openapi.json.

Every answer must be a non-5xx whose status code, content type and body the document declares.
Only schema-valid (positive) requests are generated: a path that the document rules out (a metric
name with a slash) never reaches these handlers, so aiohttp's router answers it, not this API.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.inspection.conftest import METRICS, OpsServer

# positive_data_acceptance is left out on purpose: any string is a schema-valid labelSelector or
# history, and most random ones are rightly refused with the declared 400.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
MAX_EXAMPLES = 50


def fuzz(server: OpsServer, strategy: Any) -> None:
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(case=strategy)
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=server.url, checks=CHECKS, timeout=10)

    run()


def test_every_operation_conforms(ops_server: OpsServer):
    schema = schemathesis.openapi.from_url(ops_server.url + "/openapi.json", timeout=10)
    operations = [result.ok() for result in schema.get_all_operations()]
    # Schemathesis leaves out the document's own path (/openapi.json); it was fetched and validated above.
    assert {f"{op.method.upper()} {op.path}" for op in operations} == {
        "GET /api/v1/capacity-buffers",
        "GET /api/v1/forecasts",
        "GET /api/v1/forecasts/{metric}",
        "GET /api/v1/scorecard",
        "GET /api/v1/launches",
    }
    for operation in operations:
        fuzz(ops_server, operation.as_strategy())


def test_served_metrics_conform_under_random_queries(ops_server: OpsServer):
    """Random names rarely hit a served metric: fuzz the query parameters of the real ones too."""
    schema = schemathesis.openapi.from_url(ops_server.url + "/openapi.json", timeout=10)
    operation = schema["/api/v1/forecasts/{metric}"]["GET"]
    for info in METRICS:
        fuzz(ops_server, operation.as_strategy(path_parameters={"metric": info.name}))
