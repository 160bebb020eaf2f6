"""Tools that run on the server's side at OpenAI (web search, mcp, ...): by default they
are echoed and never offered to the model, so a client that always declares one works;
SPATE_SERVER_TOOLS=reject makes them a 400 naming the tool (real API, NATS and worker)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from api.app import create_app
from api.settings import ApiSettings
from cli.nats_server import free_port
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_queue_consumer import read_requests

WEB_SEARCH = {"type": "web_search", "external_web_access": False}
MCP = {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example/sse",
       "require_approval": "never"}
NOW = {"type": "function", "name": "now", "parameters": {"type": "object", "properties": {}}}


def create(stack: Stack, **fields: Any) -> httpx.Response:
    body = {"model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 2, **fields}
    return httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=300)


def test_server_tools_are_echoed_and_not_offered(stack: Stack) -> None:
    reply = create(stack, tools=[NOW, WEB_SEARCH, MCP])
    assert reply.status_code == 200, reply.text
    response = reply.json()
    assert response["tools"] == [{**NOW, "strict": True}, WEB_SEARCH, MCP]
    (event,) = asyncio.run(read_requests(stack.nats_url, {response["id"]})).values()
    assert [tool.name for tool in event.tools] == ["now"]


def test_only_server_tools_offer_nothing(stack: Stack) -> None:
    reply = create(stack, tools=[WEB_SEARCH], tool_choice="auto")
    assert reply.status_code == 200, reply.text
    (event,) = asyncio.run(read_requests(stack.nats_url, {reply.json()["id"]})).values()
    assert event.tools == () and event.tool_choice == "none"


def test_a_server_tool_cannot_be_forced(stack: Stack) -> None:
    reply = create(stack, tools=[WEB_SEARCH], tool_choice={"type": "web_search_preview"})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "tool_choice.type"
    required = create(stack, tools=[WEB_SEARCH], tool_choice={
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search"}]})
    assert required.status_code == 400, required.text
    assert required.json()["error"]["param"] == "tool_choice.tools"


async def test_reject_policy_names_the_tool() -> None:
    settings = ApiSettings(nats_url=f"nats://127.0.0.1:{free_port()}", server_tools="reject")
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=transport, base_url="http://spate"
    ) as client:
        reply = await client.post("/v1/responses", json={
            "model": DEFAULT_MODEL, "input": "Hi", "tools": [NOW, WEB_SEARCH]})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "tools[1].type" and "web_search" in error["message"]
