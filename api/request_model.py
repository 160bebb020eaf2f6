"""The body of POST /v1/responses as spate accepts it (pydantic, strict types)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from api.fields import FIELDS, rejection_message
from api.input_items import InputItem, refuse_unknown_item_types
from api.model_base import FieldRejected, StrictModel
from api.text_format import StructuredOutputs, TextConfig
from api.tool_models import (
    Tool,
    ToolChoice,
    callable_names,
    check_tool_choice,
    refuse_unserved_tools,
)

INT64_MAX = 2**63 - 1
BUDGET_MESSAGE = "`thinking_token_budget` must be a non-negative integer or -1 for unlimited."

__all__ = ["BUDGET_MESSAGE", "FieldRejected", "ResponsesRequest"]


class ReasoningConfig(StrictModel):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class PromptCacheOptions(StrictModel):
    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m", "12h"] | None = None
    comparison_response_id: str | None = None


INCLUDABLE = ("message.output_text.logprobs", "reasoning.encrypted_content")


class ResponsesRequest(StrictModel):
    model: str = Field(min_length=1)
    input: str | list[InputItem]
    instructions: str | None = None
    stream: bool = False
    store: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = Field(default=None, ge=-(2**63), le=INT64_MAX)
    stop: str | list[str] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    thinking_token_budget: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = Field(default=None, gt=0)
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    logit_bias: dict[str, float] | None = None
    include_reasoning: bool | None = None
    include: list[str] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    truncation: Literal["auto", "disabled"] | None = None
    request_id: str | None = Field(default=None, min_length=1, max_length=200)
    priority: int | None = None
    cache_salt: str | None = Field(default=None, min_length=1)
    enable_response_messages: bool | None = None
    session_id: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)
    parallel_tool_calls: bool | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    structured_outputs: StructuredOutputs | None = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_fields(cls, body: Any) -> Any:
        if not isinstance(body, dict):
            raise FieldRejected("", "The request body must be a JSON object.")
        for name, value in body.items():
            if name not in FIELDS:
                raise FieldRejected(name, f"Unknown parameter: '{name}'.")
            message = rejection_message(name, value)
            if message is not None:
                raise FieldRejected(name, message)
        budget = body.get("thinking_token_budget")
        if budget is not None and (type(budget) is not int or budget < -1):
            raise FieldRejected("thinking_token_budget", BUDGET_MESSAGE)
        refuse_unknown_item_types(body.get("input"))
        refuse_unserved_tools(body.get("tools"), body.get("tool_choice"))
        # What is left of the fields the model does not hold is sent at its off value.
        return {name: value for name, value in body.items() if name in cls.model_fields}

    @model_validator(mode="after")
    def _consistent_answer_rules(self) -> ResponsesRequest:
        check_tool_choice(self.tool_choice, callable_names(self.tools or []))
        if self.structured_outputs is not None and self.text is not None and self.text.wants_json:
            raise FieldRejected(
                "structured_outputs",
                "structured_outputs cannot be combined with a JSON text.format; use one of them.",
            )
        return self

    @field_validator("input")
    @classmethod
    def _input_not_empty(cls, value: str | list[InputItem]) -> str | list[InputItem]:
        if isinstance(value, list) and not value:
            raise ValueError("input must hold at least one item")
        return value

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value: str | list[str] | None) -> str | list[str] | None:
        strings = [value] if isinstance(value, str) else value or []
        if any(not s for s in strings):
            raise ValueError("stop strings must not be empty")
        return value

    @field_validator("stop_token_ids")
    @classmethod
    def _token_ids(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(token_id < 0 for token_id in value):
            raise ValueError("token ids are non-negative integers")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is not None and any(not key.isdigit() for key in value):
            raise ValueError("keys must be integer token ids")
        return value

    @field_validator("include")
    @classmethod
    def _include(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or []:
            if entry not in INCLUDABLE:
                raise ValueError(f"'{entry}' cannot be included; supported: {', '.join(INCLUDABLE)}")
        return value

    @field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str | None) -> str | None:
        if value is not None and not all(c.isalnum() or c in "_-" for c in value):
            raise ValueError("use letters, digits, '_' and '-' only")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and len(value) > 16:
            raise ValueError("metadata holds at most 16 pairs")
        return value
