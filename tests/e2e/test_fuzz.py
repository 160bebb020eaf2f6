"""Fuzzing the real API process (and a real nats-server) from its own /openapi.json with
schemathesis: bodies, paths and queries generated from the document, valid ones and
broken ones. No worker runs, so a request that passes validation ends at the model check
(404 for a model nobody serves); what is asserted is that nothing is a server error
(but GET /ready, whose 503 says no worker is live) and every error is OpenAI-shaped.

The size is bounded for `make test` (about 300 cases); SPATE_FUZZ_EXAMPLES raises it for
a longer local run (docs/reliability.md records one).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from cli.nats_server import EmbeddedNats, free_port
from tests.processes import SpateProcess, wait_http

# Cases per operation; POST /v1/responses, where the request model is, gets several times
# as many.
EXAMPLES = int(os.environ.get("SPATE_FUZZ_EXAMPLES", "15"))
RESPONSES_EXAMPLES = 8 * EXAMPLES


@pytest.fixture(scope="module")
def fuzz_api() -> Iterator[tuple[str, SpateProcess]]:
    with EmbeddedNats() as server:
        port = free_port()
        # A generous NATS timeout: the machine running this may be loaded, and a 503 for
        # a slow NATS is not what this looks for.
        api = SpateProcess(["api", "--port", str(port)],
                           {"SPATE_NATS_URL": server.url, "SPATE_NATS_TIMEOUT_S": "20"},
                           "fuzz-api")
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{base_url}/health", api, timeout=60)
            yield base_url, api
        finally:
            api.stop()


def operations(base_url: str) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


def check_reply(case: Any, base_url: str, api: SpateProcess) -> int:
    response = case.call(base_url=base_url, timeout=60)
    if case.path == "/ready":  # a readiness probe: 503 while no worker is live
        assert response.status_code == 503
        return 503
    assert response.status_code < 500, (
        f"{case.method} {case.path} {case.body!r} -> {response.status_code} "
        f"{response.text[:500]}\n{api.output()[-3000:]}")
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["message"] and error["type"], response.text
    return int(response.status_code)


def fuzz(operation: Any, examples: int, base_url: str, api: SpateProcess) -> Counter[int]:
    """Run up to `examples` generated cases; the statuses they got."""
    statuses: Counter[int] = Counter()

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)
    # Half the cases follow the document, half break it (wrong types, values past the
    # bounds, missing required fields).
    @given(case=st.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                          operation.as_strategy(GenerationMode.NEGATIVE)))
    def run(case: Any) -> None:
        statuses[check_reply(case, base_url, api)] += 1

    run()
    print(f"{operation.method.upper()} {operation.path}: {dict(statuses)}")
    return statuses


def test_create_response_is_never_a_server_error(fuzz_api: tuple[str, SpateProcess]) -> None:
    base_url, api = fuzz_api
    (create,) = [operation for operation in operations(base_url)
                 if (operation.method.upper(), operation.path) == ("POST", "/v1/responses")]
    statuses = fuzz(create, RESPONSES_EXAMPLES, base_url, api)
    # Both kinds were sent: bodies the validation refuses, and ones it lets through to
    # the model check.
    assert statuses[400] and statuses[404], statuses
    assert sum(statuses.values()) >= RESPONSES_EXAMPLES // 2, statuses


def test_no_route_is_a_server_error(fuzz_api: tuple[str, SpateProcess]) -> None:
    base_url, api = fuzz_api
    others = [operation for operation in operations(base_url)
              if (operation.method.upper(), operation.path) != ("POST", "/v1/responses")]
    assert len(others) >= 10
    cases = sum(sum(fuzz(operation, EXAMPLES, base_url, api).values()) for operation in others)
    assert cases >= len(others) * EXAMPLES // 3
