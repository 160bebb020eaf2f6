"""Lowering a validated request into the RequestAccepted event workers run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api.lowering.constraints import (
    answer_constraint_of,
    tool_choice_of,
    tool_definitions,
    tools_echo,
)
from api.lowering.messages import messages_of
from api.schema.request import ResponsesRequest
from events import RequestAccepted, SamplingSettings

LOGPROBS_INCLUDE = "message.output_text.logprobs"
# The request fields that are sampling settings: the event model names them, and the
# request model validated each with the event's own type.
SAMPLING_FIELDS = frozenset(SamplingSettings.model_fields) - {"top_logprobs"}


def _unset(value: Any, default: Any) -> Any:
    return default if value is None else value


def sampling_of(
    request: ResponsesRequest, model_defaults: Mapping[str, float] | None = None
) -> SamplingSettings:
    """Resolved sampling: the request's value, else the model's recommendation, else
    the event's default (what OpenAI's API uses)."""
    chosen = request.model_dump(include=set(SAMPLING_FIELDS), exclude_none=True)
    wants_logprobs = LOGPROBS_INCLUDE in (request.include or [])
    top_logprobs = _unset(request.top_logprobs, 0) if wants_logprobs else None
    return SamplingSettings.model_validate(
        {**(model_defaults or {}), **chosen, "top_logprobs": top_logprobs}
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


# Request fields the Response repeats as they came (when the request set them).
ECHOED = (
    "instructions", "metadata", "user", "max_output_tokens", "max_tool_calls",
    "parallel_tool_calls", "service_tier", "top_logprobs", "truncation", "prompt_cache_key",
    "prompt_cache_retention", "safety_identifier", "kv_transfer_params",
)


def echo_of(request: ResponsesRequest) -> dict[str, Any]:
    echo: dict[str, Any] = {
        name: getattr(request, name) for name in ECHOED if getattr(request, name) is not None
    }
    if request.reasoning is not None:
        # effort and summary always (the Response's Reasoning shape), the rest when set.
        reasoning = request.reasoning
        echo["reasoning"] = {"effort": reasoning.effort, "summary": reasoning.summary,
                             **reasoning.model_dump(exclude_none=True)}
    if request.prompt_cache_options is not None:
        echo["prompt_cache_options"] = request.prompt_cache_options.model_dump(exclude_none=True)
    if request.text is not None:
        text = request.text.model_dump(exclude_none=True, by_alias=True)
        echo["text"] = text or {"format": {"type": "text"}}
    echo.update(tools_echo(request))
    return echo


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the event records beyond the body it lowers, gathered before it is built:
    the store's part (whether to keep the response, the items it was given with the
    earlier turns first, its conversation, whether it runs in the background), the
    fields those earlier turns add to the echo, and the compaction item that replaced
    the input's older turns."""

    store: bool = False
    background: bool = False
    input_items: tuple[dict[str, Any], ...] = ()
    new_input_from: int = 0
    conversation_id: str | None = None
    echo: Mapping[str, Any] = field(default_factory=dict)
    compaction: dict[str, Any] | None = None


def accept(
    request: ResponsesRequest,
    response_id: str,
    model_defaults: Mapping[str, float] | None = None,
    *,
    owner: str,
    recorded: Recorded | None = None,
) -> RequestAccepted:
    """The request event, built once and complete: the lowered body and what
    `recorded` adds (nothing by default)."""
    recorded = recorded or Recorded()
    tool_choice, allowed_tool_names = tool_choice_of(request)
    return RequestAccepted(
        response_id=response_id,
        seq=0,
        model=request.model,
        messages=messages_of(request),
        sampling=sampling_of(request, model_defaults),
        thinking_token_budget=request.thinking_token_budget,
        enable_thinking=thinking_switch(request),
        reasoning_effort=request.reasoning.effort if request.reasoning else None,
        chat_template_kwargs=request.chat_template_kwargs or {},
        stream=request.stream,
        truncation=request.truncation or "disabled",
        include_reasoning=_unset(request.include_reasoning, True),
        enable_response_messages=_unset(request.enable_response_messages, False),
        priority=_unset(request.priority, 0),
        cache_salt=request.cache_salt,
        session_id=request.session_id,
        kv_transfer_params=request.kv_transfer_params,
        ec_transfer_params=request.ec_transfer_params,
        vllm_xargs=request.vllm_xargs,
        client_metadata=request.client_metadata,
        prompt_cache_key=request.prompt_cache_key,
        tools=tool_definitions(request),
        tool_choice=tool_choice,
        allowed_tool_names=allowed_tool_names,
        parallel_tool_calls=_unset(request.parallel_tool_calls, True),
        answer_constraint=answer_constraint_of(request),
        echo={**echo_of(request), **recorded.echo},
        owner=owner,
        store=recorded.store,
        input_items=recorded.input_items,
        new_input_from=recorded.new_input_from,
        conversation_id=recorded.conversation_id,
        background=recorded.background,
        compaction=recorded.compaction,
    )
