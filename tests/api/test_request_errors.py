"""Bad requests get OpenAI-shaped errors naming the field, never a 500 (real API + NATS)."""

from __future__ import annotations

import httpx
import pytest

from cli.nats_server import free_port
from tests.conftest import Stack
from tests.processes import SpateProcess, wait_http

MODEL = "SmolLM2-135M-Instruct"
BUDGET_MESSAGE = "`thinking_token_budget` must be a non-negative integer or -1 for unlimited."


def post(stack: Stack, body: object, **kwargs: object) -> httpx.Response:
    return httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=10, **kwargs)  # type: ignore[arg-type]


def error_of(reply: httpx.Response, status: int) -> dict[str, object]:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_malformed_json(api_server: Stack) -> None:
    reply = httpx.post(f"{api_server.base_url}/v1/responses", content=b"{nope",
                       headers={"content-type": "application/json"})
    error = error_of(reply, 400)
    assert error["type"] == "invalid_request_error"
    assert "JSON" in str(error["message"])


def test_body_not_an_object(api_server: Stack) -> None:
    error_of(post(api_server, [1, 2]), 400)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL, "input": 5}, "input"),
        ({"model": MODEL, "input": "hi", "temperature": "hot"}, "temperature"),
        ({"model": MODEL, "input": "hi", "temperature": 2.5}, "temperature"),
        ({"model": MODEL, "input": "hi", "top_p": 0}, "top_p"),
        ({"model": MODEL, "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": MODEL, "input": "hi", "stop": ["ok", ""]}, "stop"),
        ({"model": MODEL, "input": "hi", "stream": "yes"}, "stream"),
        ({"model": MODEL, "input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
        ({"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
         "input[0].content[0].text"),
        ({"input": "hi"}, "model"),
        ({"model": MODEL, "input": "hi",
          "stream_options": {"reasoning_summary_delivery": "whenever"}},
         "stream_options.reasoning_summary_delivery"),
    ],
)
def test_wrong_values_name_the_field(api_server: Stack, body: dict[str, object], param: str) -> None:
    error = error_of(post(api_server, body), 400)
    assert error["param"] == param, error


def test_unknown_key(api_server: Stack) -> None:
    error = error_of(post(api_server, {"model": MODEL, "input": "hi", "colour": 1}), 400)
    assert error["message"] == "Unknown parameter: 'colour'."
    assert error["param"] == "colour"


@pytest.mark.parametrize("field", ["prompt", "mm_processor_kwargs", "previous_input_messages"])
def test_fields_not_served_are_refused_by_name(api_server: Stack, field: str) -> None:
    error = error_of(post(api_server, {"model": MODEL, "input": "hi", field: [1]}), 400)
    assert error["param"] == field


WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        # Server-side tools are accepted (tests/e2e/test_server_tools.py); unknown types are not.
        ({"tools": [{"type": "teleport"}]}, "tools[0].type", "teleport"),
        ({"tools": [WEATHER, {"type": "teleport", "to": "Mars"}]}, "tools[1].type", "teleport"),
        ({"tools": [{"type": "namespace", "name": "ns", "description": "d",
                     "tools": [{"type": "web_search"}]}]}, "tools[0].tools[0].type", "web_search"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].name", "twice"),
        ({"tools": [{**WEATHER, "name": "get weather"}]}, "tools[0].name", "pattern"),
        ({"tools": [{**WEATHER, "parameters": {"type": "array"}}]}, "tools[0].parameters", "object"),
        ({"tool_choice": "required"}, "tool_choice", "tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_time"}},
         "tool_choice.name", "get_time"),
        ({"tool_choice": {"type": "function", "name": "get_weather"}}, "tool_choice.name", "get_weather"),
        ({"tools": [WEATHER], "tool_choice": {"type": "file_search"}}, "tool_choice.type", "file_search"),
        ({"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "mode": "required",
                                               "tools": [{"type": "function", "name": "nope"}]}},
         "tool_choice.tools[0].name", "nope"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "item_reference"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id",
         "required"),
        ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "x"}]},
         "input[0].encrypted_content", "encrypted"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema", "required"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format.type", "yaml"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one"),
        ({"structured_outputs": {"json": "{not json"}}, "structured_outputs.json", "JSON"),
        ({"structured_outputs": {"choice": ["a"]}, "text": {"format": {"type": "json_object"}}},
         "structured_outputs", "text.format"),
    ],
)
def test_tool_and_format_errors_name_the_field(
    api_server: Stack, fields: dict[str, object], param: str, says: str
) -> None:
    error = error_of(post(api_server, {"model": MODEL, "input": "hi", **fields}), 400)
    assert error["param"] == param, error
    assert says in str(error["message"]), error


@pytest.mark.parametrize(("field", "value"), [
    ("background", True), ("previous_response_id", "resp_1"), ("conversation", {"id": "conv_1"}),
])
def test_store_features_name_the_store_variable(api_server: Stack, field: str, value: object) -> None:
    error = error_of(post(api_server, {"model": MODEL, "input": "hi", field: value}), 400)
    assert error["param"] == field
    assert "SPATE_STORE_URL" in str(error["message"])


def test_fields_at_their_defaults_pass_validation(api_server: Stack) -> None:
    """An unknown model is looked up only after the body validated, so its 404 shows the
    defaults were accepted (tests/api/test_field_defaults.py sweeps every field)."""
    defaults = {"background": False, "previous_response_id": None, "conversation": None,
                "prompt": None, "stream_options": None, "store": True, "tool_choice": "auto"}
    error = error_of(post(api_server, {"model": "no-such-model", "input": "hi", **defaults}), 404)
    assert error["param"] == "model"


@pytest.mark.parametrize("budget", [-2, 1.5, True, "5", -100])
def test_bad_thinking_budget(api_server: Stack, budget: object) -> None:
    error = error_of(post(api_server, {"model": MODEL, "input": "hi", "thinking_token_budget": budget}), 400)
    assert error["message"] == BUDGET_MESSAGE
    assert error["param"] == "thinking_token_budget"


def test_codex_stream_options_pass_validation(api_server: Stack) -> None:
    """What Codex sends with its concurrent reasoning summaries on: validated, then the
    unknown model's 404."""
    options = {"reasoning_summary_delivery": "sequential_cutoff", "include_obfuscation": False}
    body = {"model": "no-such-model", "input": "hi", "stream_options": options}
    assert error_of(post(api_server, body), 404)["param"] == "model"


def test_unknown_model_is_404(api_server: Stack) -> None:
    error = error_of(post(api_server, {"model": "no-such-model", "input": "hi"}), 404)
    assert error["param"] == "model"


def test_oversized_body_is_413(api_server: Stack) -> None:
    error_of(post(api_server, {"model": MODEL, "input": "x" * (5 * 1024 * 1024)}), 413)


def test_nats_down_is_503_not_a_hang() -> None:
    port = free_port()
    dead_nats = f"nats://127.0.0.1:{free_port()}"
    api = SpateProcess(["api", "--port", str(port)], {"SPATE_NATS_URL": dead_nats}, "api-no-nats")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/health", api, timeout=60)
        reply = httpx.post(f"{base}/v1/responses", json={"model": MODEL, "input": "hi"}, timeout=5)
        error = error_of(reply, 503)
        assert "NATS" in str(error["message"])
        assert httpx.get(f"{base}/ready", timeout=5).status_code == 503
    finally:
        api.stop()
