"""Lowering `instructions` and the `input` items into the chat turns a template renders:
function calls (and custom and built-in tool calls) join the assistant turn that made
them, their outputs become tool turns,
and reasoning items travel with the assistant turn that follows them."""

from __future__ import annotations

from api.schema.input_items import (
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
)
from api.schema.request import ResponsesRequest
from api.schema.tool_items import ToolCallItem, ToolOutputItem
from events import ChatMessage, ToolCall


def messages_of(request: ResponsesRequest) -> tuple[ChatMessage, ...]:
    messages: list[ChatMessage] = []
    if request.instructions:
        messages.append(ChatMessage(role="system", content=request.instructions))
    if isinstance(request.input, str):
        messages.append(ChatMessage(role="user", content=request.input))
        return tuple(messages)
    reasoning: list[str] = []
    # A local_shell_call_output names its call by the call's item id.
    call_ids: dict[str, str] = {}
    for item in request.input:
        if isinstance(item, ReasoningItem):
            reasoning.append(item.text())
            continue
        if isinstance(item, MessageItem):
            message = ChatMessage(role=item.role, content=item.text())
        elif isinstance(item, FunctionCallItem | ToolCallItem):
            call = (item.tool_call() if not isinstance(item, FunctionCallItem) else ToolCall(
                call_id=item.call_id, name=item.qualified_name(), arguments=item.arguments))
            if item.id is not None:
                call_ids[item.id] = item.call_id
            if _continues_assistant_turn(messages) and not reasoning:
                # Parallel calls, or a call after the turn's text: one assistant turn.
                last = messages.pop()
                message = last.model_copy(update={"tool_calls": (*last.tool_calls, call)})
            else:
                message = ChatMessage(role="assistant", content="", tool_calls=(call,))
        elif isinstance(item, FunctionCallOutputItem):
            message = _tool_turn(item)
        elif isinstance(item, ToolOutputItem):
            answered = item.answered()
            message = ChatMessage(role="tool", content=item.text(),
                                  tool_call_id=call_ids.get(answered, answered))
        else:  # an item_reference: api/lowering/history.py resolves them before lowering
            raise TypeError(f"an unresolved item reference reached the prompt: {item.id}")
        if reasoning and message.role == "assistant":
            message = message.model_copy(update={"reasoning": "".join(reasoning)})
            reasoning.clear()
        messages.append(message)
    if reasoning:
        # Reasoning with no turn after it still reaches the template, on an empty turn.
        messages.append(ChatMessage(role="assistant", content="", reasoning="".join(reasoning)))
    return tuple(messages)


def _continues_assistant_turn(messages: list[ChatMessage]) -> bool:
    return bool(messages) and messages[-1].role == "assistant"


def _tool_turn(item: FunctionCallOutputItem) -> ChatMessage:
    return ChatMessage(role="tool", content=item.text(), tool_call_id=item.call_id)
