"""Custom tools and the client-run built-ins against a real stack, through the official
SDK in strict mode: a custom tool's input is held to its regex or Lark grammar by
constrained decoding and streams as custom_tool_call_input events; local_shell, shell
and apply_patch come back as their own item types; each is accepted back as input."""

from __future__ import annotations

import re
from typing import Any

import pytest
from lark import Lark
from openai import OpenAI

from tests.conftest import DEFAULT_MODEL, Stack

REGEX = r"[0-9]{1,3} [+*] [0-9]{1,3}"
LARK = r"""
start: "SELECT " COLUMN " FROM " TABLE
COLUMN: /[a-z]{1,8}/
TABLE: /[a-z]{1,8}/
"""
CALCULATOR = {"type": "custom", "name": "calculator", "description": "Evaluates arithmetic.",
              "format": {"type": "grammar", "syntax": "regex", "definition": REGEX}}
SQL = {"type": "custom", "name": "sql", "description": "Runs a query.",
       "format": {"type": "grammar", "syntax": "lark", "definition": LARK}}
QUESTION = [{"role": "user", "content": "What is 12 times 7?"}]


@pytest.fixture(scope="module")
def client(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.base_url}/v1", api_key="unused",
                  _strict_response_validation=True, timeout=300)


def create(client: OpenAI, **fields: Any) -> Any:
    # One call a response: what each test checks is that call.
    return client.responses.create(**{"model": DEFAULT_MODEL, "input": QUESTION, "temperature": 0,
                                      "max_output_tokens": 48, "parallel_tool_calls": False,
                                      **fields})


def test_a_regex_custom_tool_streams_its_input_held_to_the_grammar(client: OpenAI) -> None:
    stream = client.responses.create(
        model=DEFAULT_MODEL, input=QUESTION, temperature=0, max_output_tokens=48, stream=True,
        parallel_tool_calls=False,
        tools=[CALCULATOR], tool_choice={"type": "custom", "name": "calculator"})
    deltas, done, final = [], None, None
    for event in stream:
        if event.type == "response.custom_tool_call_input.delta":
            deltas.append(event.delta)
        elif event.type == "response.custom_tool_call_input.done":
            done = event.input
        elif event.type == "response.completed":
            final = event.response
    assert final is not None and done is not None
    (call,) = final.output
    assert call.type == "custom_tool_call" and call.name == "calculator"
    assert re.fullmatch(REGEX, call.input), call.input
    assert "".join(deltas) == done == call.input
    assert final.tools[0].type == "custom"


def test_a_lark_custom_tool_writes_a_sentence_of_its_grammar(client: OpenAI) -> None:
    response = create(client, tools=[SQL], tool_choice={"type": "custom", "name": "sql"})
    (call,) = response.output
    assert call.type == "custom_tool_call" and call.name == "sql"
    Lark(LARK).parse(call.input)  # raises unless the input is a sentence of the grammar


def test_a_custom_tool_output_goes_back_to_the_model(client: OpenAI) -> None:
    first = create(client, tools=[CALCULATOR], tool_choice={"type": "custom", "name": "calculator"})
    (call,) = first.output
    follow_up = create(client, tools=[CALCULATOR], tool_choice="none", input=[
        *QUESTION,
        {"type": "custom_tool_call", "call_id": call.call_id, "name": call.name, "input": call.input},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "84"},
    ])
    assert follow_up.status in ("completed", "incomplete")
    assert follow_up.output[0].type == "message"


@pytest.mark.parametrize(("tool", "item_type", "ask"), [
    ({"type": "apply_patch"}, "apply_patch_call", "Make a file notes.txt saying hi."),
    ({"type": "shell", "environment": {"type": "local"}}, "shell_call", "Run the command: ls"),
    ({"type": "local_shell"}, "local_shell_call", "Run the command: ls"),
])
def test_a_builtin_comes_back_as_its_own_item(
    client: OpenAI, tool: dict[str, Any], item_type: str, ask: str
) -> None:
    choice = {"type": tool["type"]} if tool["type"] != "local_shell" else "required"
    response = create(client, input=[{"role": "user", "content": ask}],
                      tools=[tool], tool_choice=choice, max_output_tokens=128)
    (call,) = response.output
    assert call.type == item_type and call.status == "completed", call
    if item_type == "apply_patch_call":
        assert call.operation.type in ("create_file", "update_file", "delete_file")
    elif item_type == "shell_call":
        assert call.action.commands
    else:
        assert call.action.command
    # Sent back with its output, it is accepted.
    output = {"apply_patch_call": {"type": "apply_patch_call_output", "call_id": call.call_id,
                                   "status": "completed"},
              "shell_call": {"type": "shell_call_output", "call_id": call.call_id, "output": [
                  {"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
              "local_shell_call": {"type": "local_shell_call_output", "id": call.id,
                                   "output": "done"}}[item_type]
    follow_up = create(client, tools=[tool], tool_choice="none",
                       input=[*QUESTION, call.model_dump(exclude_none=True), output])
    assert follow_up.output[0].type == "message"
