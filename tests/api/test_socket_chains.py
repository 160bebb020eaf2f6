"""A continuation's tool outputs against the chain the connection holds
(api/websocket/chains.unanswered_output), and the held chains' byte bound."""

from __future__ import annotations

from typing import Any

from api.schema.input_items import FunctionCallItem, FunctionCallOutputItem, MessageItem
from api.websocket.chains import HeldChains, size_of, unanswered_output

CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather",
        "arguments": "{}", "id": "fc_1", "status": "completed"}
HISTORY: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "Weather?"}, CALL]


def output(call_id: str) -> FunctionCallOutputItem:
    return FunctionCallOutputItem(type="function_call_output", call_id=call_id, output="fog")


def test_an_output_answering_a_call_of_the_chain_fits() -> None:
    assert unanswered_output(HISTORY, [output("call_1")]) is None
    assert unanswered_output(HISTORY, [MessageItem(role="user", content="hi")]) is None


def test_an_output_answering_a_call_earlier_in_its_own_input_fits() -> None:
    call = FunctionCallItem(type="function_call", call_id="call_2", name="f", arguments="{}")
    assert unanswered_output(HISTORY, [call, output("call_2")]) is None


def test_an_output_answering_no_call_is_named_by_index_and_call_id() -> None:
    assert unanswered_output(HISTORY, [MessageItem(role="user", content="x"),
                                       output("call_nope")]) == (1, "call_nope")
    assert unanswered_output([], [output("call_1")]) == (0, "call_1")
    # A call that comes after the output does not count: the output answers nothing yet.
    call = FunctionCallItem(type="function_call", call_id="call_3", name="f", arguments="{}")
    assert unanswered_output(HISTORY, [output("call_3"), call]) == (0, "call_3")


def test_dropping_a_chain_frees_its_bytes() -> None:
    chains = HeldChains(max_bytes=10_000)
    assert chains.hold("resp_1", HISTORY)
    assert chains.bytes == size_of(HISTORY) and "resp_1" in chains
    chains.drop("resp_1")
    assert chains.history("resp_1") is None and chains.bytes == 0
