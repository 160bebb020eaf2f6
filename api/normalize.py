"""Lowering a validated request into the RequestAccepted event workers run."""

from __future__ import annotations

from typing import Any

from api.request_model import ResponsesRequest
from events import ChatMessage, RequestAccepted, SamplingSettings


def messages_of(request: ResponsesRequest) -> tuple[ChatMessage, ...]:
    messages: list[ChatMessage] = []
    if request.instructions:
        messages.append(ChatMessage(role="system", content=request.instructions))
    if isinstance(request.input, str):
        messages.append(ChatMessage(role="user", content=request.input))
    else:
        messages.extend(ChatMessage(role=item.role, content=item.text()) for item in request.input)
    return tuple(messages)


def sampling_of(request: ResponsesRequest) -> SamplingSettings:
    stop = request.stop
    return SamplingSettings(
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=0 if request.top_k in (None, -1) else request.top_k,
        min_p=request.min_p or 0.0,
        seed=request.seed,
        stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
        max_output_tokens=request.max_output_tokens,
    )


def thinking_switch(request: ResponsesRequest) -> bool | None:
    """reasoning.effort 'none' turns thinking off and any other effort on, unless the
    client's chat_template_kwargs.enable_thinking says otherwise; None: model default."""
    kwargs = request.chat_template_kwargs or {}
    if "enable_thinking" in kwargs:
        return bool(kwargs["enable_thinking"])
    if request.reasoning is None or request.reasoning.effort is None:
        return None
    return request.reasoning.effort != "none"


def echo_of(request: ResponsesRequest) -> dict[str, Any]:
    echo: dict[str, Any] = {
        "instructions": request.instructions,
        "metadata": request.metadata,
        "user": request.user,
        "max_output_tokens": request.max_output_tokens,
        "reasoning": request.reasoning.model_dump() if request.reasoning else None,
    }
    if request.text is not None:
        echo["text"] = request.text.model_dump(exclude_none=True) or {"format": {"type": "text"}}
    return echo


def accept(request: ResponsesRequest, response_id: str) -> RequestAccepted:
    budget = request.thinking_token_budget
    return RequestAccepted(
        response_id=response_id,
        seq=0,
        model=request.model,
        messages=messages_of(request),
        sampling=sampling_of(request),
        thinking_token_budget=None if budget in (None, -1) else budget,
        enable_thinking=thinking_switch(request),
        reasoning_effort=request.reasoning.effort if request.reasoning else None,
        chat_template_kwargs=request.chat_template_kwargs or {},
        stream=request.stream,
        echo=echo_of(request),
    )
