"""Builders for the OpenAI Response object and its output items, as plain JSON dicts."""

from __future__ import annotations

from typing import Any

from events.generation import TokenLogprob, Usage
from events.request import RequestAccepted


def usage_object(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.input_tokens - usage.cached_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def length_incomplete_details(max_output_tokens: int | None, usage: Usage) -> dict[str, Any]:
    """`incomplete_details` of a response cut by a length limit. `reason` stays
    "max_output_tokens", the one length reason in the contract (OpenAI's SDK, validating
    strictly, allows it and "content_filter" only); where the model's context was the limit
    rather than max_output_tokens, a `message` says so plainly (the schema allows more keys,
    and the SDK keeps them), since a request without max_output_tokens otherwise runs to
    the context's end with nothing saying why."""
    details: dict[str, Any] = {"reason": "max_output_tokens"}
    if max_output_tokens is not None and usage.output_tokens >= max_output_tokens:
        return details
    total = usage.input_tokens + usage.output_tokens
    limit = (
        "no max_output_tokens was set" if max_output_tokens is None
        else f"before max_output_tokens ({max_output_tokens})"
    )
    details["message"] = (
        f"The response reached the end of the model's context: {total} tokens "
        f"({usage.input_tokens} input, {usage.output_tokens} output); {limit}. "
        "Set max_output_tokens to end a response sooner."
    )
    return details


def logprob_objects(logprobs: tuple[TokenLogprob, ...] | None) -> list[dict[str, Any]]:
    if not logprobs:
        return []
    return [
        {
            "token": entry.token,
            "bytes": list(entry.token.encode()),
            "logprob": entry.logprob,
            "top_logprobs": [
                {"token": token, "bytes": list(token.encode()), "logprob": logprob}
                for token, logprob in entry.top_logprobs
            ],
        }
        for entry in logprobs
    ]


def reasoning_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content, "status": status}


def output_text_part(text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def message_item(
    item_id: str, text: str | None, logprobs: list[dict[str, Any]], status: str
) -> dict[str, Any]:
    content = [] if text is None else [output_text_part(text, logprobs)]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def function_call_item(
    item_id: str, call_id: str, name: str, namespace: str | None, arguments: str, status: str
) -> dict[str, Any]:
    item = {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def custom_tool_call_item(
    item_id: str, call_id: str, name: str, namespace: str | None, text: str
) -> dict[str, Any]:
    """A custom tool's call: its input is the text the model wrote (the item has no status)."""
    item = {"id": item_id, "type": "custom_tool_call", "call_id": call_id, "name": name,
            "input": text}
    if namespace is not None:
        item["namespace"] = namespace
    return item


# Echoed fields with the value a Response carries when the request left them out.
ECHO_DEFAULTS: dict[str, Any] = {
    "instructions": None,
    "metadata": None,
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "max_output_tokens": None,
    "max_tool_calls": None,
    "previous_response_id": None,
    "reasoning": None,
    "service_tier": "auto",
    "store": False,
    "background": False,
    "text": {"format": {"type": "text"}},
    # The SDK and the Open Responses schema both type it an integer.
    "top_logprobs": 0,
    "truncation": "disabled",
    "user": None,
    "safety_identifier": None,
    "prompt_cache_key": None,
    "prompt_cache_retention": None,
    "input_messages": None,
    "output_messages": None,
}


def response_object(
    request: RequestAccepted,
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None = None,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, Any] | None = None,
    completed_at: float | None = None,
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "id": request.response_id,
        "object": "response",
        "created_at": int(request.created_at),
        "model": request.model,
        "status": status,
        "output": output,
        "usage": usage_object(usage) if usage is not None else None,
        "error": error,
        "incomplete_details": incomplete_details,
        "completed_at": int(completed_at) if completed_at is not None else None,
        "temperature": request.sampling.temperature,
        "top_p": request.sampling.top_p,
        "presence_penalty": request.sampling.presence_penalty,
        "frequency_penalty": request.sampling.frequency_penalty,
    }
    response.update(ECHO_DEFAULTS)
    response.update(request.echo)
    return response
