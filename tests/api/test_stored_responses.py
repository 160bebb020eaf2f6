"""The routes that look a response up answer OpenAI's 404 while the store is off, and any
unknown route or method gets an OpenAI-shaped error too (real API + NATS)."""

from __future__ import annotations

import httpx
import pytest

from tests.api.test_request_errors import error_of
from tests.conftest import Stack


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/responses/resp_x"),
    ("GET", "/v1/responses/resp_x?stream=true&starting_after=3"),
    ("DELETE", "/v1/responses/resp_x"),
    ("POST", "/v1/responses/resp_x/cancel"),
    ("GET", "/v1/responses/resp_x/input_items"),
])
def test_unknown_response_ids_are_openai_404s(api_server: Stack, method: str, path: str) -> None:
    reply = httpx.request(method, f"{api_server.base_url}{path}", timeout=10)
    error = error_of(reply, 404)
    assert str(error["message"]).startswith("Response with id 'resp_x' not found.")
    assert "SPATE_STORE_URL" in str(error["message"])
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "response_id"
    assert error["code"] == "not_found"


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/nope", 404),
    ("POST", "/v1/chat/completions", 404),
    ("PUT", "/v1/responses", 405),
    ("GET", "/v1/responses", 405),
])
def test_unknown_routes_and_methods_are_openai_errors(
    api_server: Stack, method: str, path: str, status: int
) -> None:
    reply = httpx.request(method, f"{api_server.base_url}{path}", timeout=10)
    error = error_of(reply, status)
    assert error["type"] == "invalid_request_error"
    assert f"({method} {path})" in str(error["message"])
