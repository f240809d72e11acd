"""Issue 38, case 4: an error quotes at most 1 KiB of any input, on every port. Each case is sent to the
real servers (HTTPS with a client certificate, the plain ops port) and the whole answer is checked:
status, exact JSON (or the HTML's quote), and its size."""

from __future__ import annotations

import json
from html import escape
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.echoes import MAX_ECHO_BYTES, echo
from autoscaler.web.security.auth import REVIEW_ENTRY_OVERHEAD_BYTES, ReviewCache, SubjectAccessReviewAuthorizer, User
from tests.autoscaler.conftest import RunningServer

PREFIX = "/apis/external.metrics.k8s.io/v1beta1"
SERVED = "served: gpu_demand_forecast, gpu_headroom, request_rate_forecast"
LONG_NAME = "m" * 60_000  # the probe's metric name: under the 64 KiB request line
# The probe's selector: 16,000 characters, valid up to an unclosed "(".
LONG_SELECTOR = ("pool in (" + ",".join(f"v{index}" for index in range(3_000)))[:16_000]
LONG_HISTORY = "9" * 16_000 + "h"
# An error answer: each quote of an input is at most 1 KiB, and an input is quoted at most three times
# (a 403 names the resource twice, as kube-apiserver words it, and details.name once).
MAX_ANSWER_BYTES = 4 * MAX_ECHO_BYTES


def cut(text: str) -> str:
    """What the service quotes of a long ASCII input: its first 1 KiB and how much was left out."""
    return f"{text[:MAX_ECHO_BYTES]}... ({len(text) - MAX_ECHO_BYTES} more bytes)"


class DeniedInForbidden:
    """A SubjectAccessReview answer: any user may get any metric, except in the namespace "forbidden"."""

    def __init__(self) -> None:
        self.reviews = 0

    async def review_access(self, user: User, *, verb: str, group: str, resource: str, namespace: str) -> bool:
        self.reviews += 1
        return namespace != "forbidden"


@pytest.fixture
def authorizer_override() -> SubjectAccessReviewAuthorizer:
    return SubjectAccessReviewAuthorizer(DeniedInForbidden())


async def answer(server: RunningServer, url: str, *, method: str = "GET", **params: str) -> tuple[int, bytes]:
    """Status and body bytes of one request; HTTPS as alice (certificate), the ops port as anyone."""
    secure = url.startswith(server.base_url)
    context: Any = server.ssl_context(server.pki.alice) if secure else None
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, params=params or None, ssl=context) as response,
    ):
        return response.status, await response.read()


def json_answer(body: bytes) -> dict[str, Any]:
    assert len(body) < MAX_ANSWER_BYTES, len(body)
    document: dict[str, Any] = json.loads(body)
    return document


STATUS_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed"}


def status(code: int, message: str, **details: str) -> dict[str, Any]:
    """The ``metav1.Status`` kube-apiserver would answer, written out here, not built by the service's code."""
    document: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": STATUS_REASONS[code],
        "code": code,
    }
    if details:
        document["details"] = {"group": "external.metrics.k8s.io", **details}
    return document


def test_echo_keeps_short_input_whole_and_cuts_long_input_at_a_character():
    assert echo("gpu_headroom") == "gpu_headroom"
    assert echo("x" * MAX_ECHO_BYTES) == "x" * MAX_ECHO_BYTES
    assert echo("x" * 60_000) == cut("x" * 60_000)
    # UTF-8 bytes, never half a character: 341 three-byte characters are 1,023 bytes.
    assert echo("€" * 1_000) == "€" * 341 + "... (1977 more bytes)"
    assert echo("\udcff" * 2_000) == "... (6000 more bytes)"  # lone surrogates (undecodable path bytes)


async def test_a_60000_character_metric_name_is_quoted_to_1_kib_in_the_https_404(api_server):
    code, body = await answer(api_server, f"{api_server.base_url}{PREFIX}/namespaces/default/{LONG_NAME}")
    assert code == 404
    assert json_answer(body) == status(
        404,
        f"external metric '{cut(LONG_NAME)}' is not served by this configuration; {SERVED}",
        name=cut(LONG_NAME),
        kind="ExternalMetricValueList",
    )


async def test_a_16000_character_selector_is_quoted_to_1_kib_in_the_https_400(api_server):
    url = f"{api_server.base_url}{PREFIX}/namespaces/default/gpu_headroom"
    code, body = await answer(api_server, url, labelSelector=LONG_SELECTOR)
    assert code == 400
    assert json_answer(body) == status(400, f"invalid labelSelector: unclosed '(' in '{cut(LONG_SELECTOR)}'")


async def test_a_long_path_is_quoted_to_1_kib_in_the_405(api_server):
    path = f"{PREFIX}/namespaces/default/{LONG_NAME}"
    code, body = await answer(api_server, api_server.base_url + path, method="DELETE")
    assert code == 405
    assert json_answer(body) == status(405, f"the server does not allow this method on {cut(path)}")


async def test_a_long_metric_name_is_quoted_to_1_kib_in_the_subject_access_review_403(api_server):
    code, body = await answer(api_server, f"{api_server.base_url}{PREFIX}/namespaces/forbidden/{LONG_NAME}")
    assert code == 403
    message = (
        f'external.metrics.k8s.io "{cut(LONG_NAME)}" is forbidden: User "alice" cannot get resource '
        f'"{cut(LONG_NAME)}" in API group "external.metrics.k8s.io" in the namespace "forbidden"'
    )
    assert json_answer(body) == status(403, message, name=cut(LONG_NAME), kind="ExternalMetricValueList")


async def test_the_ops_port_quotes_1_kib_of_a_long_metric_history_or_selector(api_server):
    forecasts = f"{api_server.ops_url}/api/v1/forecasts"
    code, body = await answer(api_server, f"{forecasts}/{LONG_NAME}")
    assert code == 404
    assert json_answer(body) == status(404, f"metric '{cut(LONG_NAME)}' is not served by this configuration; {SERVED}")
    code, body = await answer(api_server, f"{forecasts}/gpu_headroom", history=LONG_HISTORY)
    expected = f"invalid history '{cut(LONG_HISTORY)}': expected a duration with a unit, e.g. 6h or 90m"
    assert (code, json_answer(body)) == (400, invalid_parameter("history", expected))
    code, body = await answer(api_server, forecasts, labelSelector=LONG_SELECTOR)
    expected = f"invalid labelSelector: unclosed '(' in '{cut(LONG_SELECTOR)}'"
    assert (code, json_answer(body)) == (400, invalid_parameter("labelSelector", expected))
    code, body = await answer(api_server, f"{forecasts}/gpu_headroom", labelSelector=LONG_SELECTOR)
    assert (code, json_answer(body)) == (400, invalid_parameter("labelSelector", expected))


def invalid_parameter(field: str, message: str) -> dict[str, Any]:
    document = status(400, message)
    document["details"] = {"causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}]}
    return document


async def test_the_ops_pages_quote_1_kib_of_a_long_metric_or_history(api_server):
    code, short = await answer(api_server, f"{api_server.ops_url}/ui/no_such_metric")
    assert code == 404
    code, long = await answer(api_server, f"{api_server.ops_url}/ui/{LONG_NAME}")
    assert code == 404
    html = long.decode()
    assert f"The metric &#x27;{escape(cut(LONG_NAME))}&#x27; is not served by this configuration" in html
    # The same page as for a short name, but for the quote: 1 KiB and the count of what was cut.
    assert len(long) - len(short) == len(cut(LONG_NAME)) - len("no_such_metric")
    code, body = await answer(api_server, f"{api_server.ops_url}/ui/gpu_headroom", history=LONG_HISTORY)
    assert code == 400
    assert f"invalid history &#x27;{escape(cut(LONG_HISTORY))}&#x27;" in body.decode()
    assert len(body) < len(short) + MAX_ANSWER_BYTES


@given(st.text(max_size=3_000), st.integers(min_value=1, max_value=2_048))
def test_an_echo_is_a_prefix_of_the_input_within_the_limit(text, limit):
    shown = echo(text, limit)
    if len(text.encode("utf-8", "surrogatepass")) <= limit:
        assert shown == text
    else:
        kept, _, said = shown.rpartition("... (")
        assert text.startswith(kept) and len(kept.encode("utf-8")) <= limit
        assert said == f"{len(text.encode('utf-8', 'surrogatepass')) - len(kept.encode('utf-8'))} more bytes)"


def test_the_review_cache_weighs_its_keys_and_keeps_nothing_heavier_than_its_bound():
    cache = ReviewCache(60.0, max_bytes=10 * 1024)
    for index in range(100):
        cache.put(("user", "get", f"/{index}" + "p" * 1_000), True, 1_002)
    assert cache.bytes <= 10 * 1024 and len(cache) == 10 * 1024 // (1_002 + REVIEW_ENTRY_OVERHEAD_BYTES)
    assert cache.get(("user", "get", "/99" + "p" * 1_000)) is True  # the newest are kept
    assert cache.get(("user", "get", "/0" + "p" * 1_000)) is None
    cache.put(("user", "get", "/huge"), False, 20 * 1024)
    assert cache.get(("user", "get", "/huge")) is None
