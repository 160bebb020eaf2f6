"""The body of POST /v1/responses as spate accepts it (pydantic, strict types)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from api.guards.limits import METADATA_PAIRS
from api.schema.fields import FIELDS, rejection_message
from api.schema.input_items import REQUEST_ITEM_TAGS, RequestInputItem, refuse_unknown_item_types
from api.schema.model_base import FieldRejected, StrictModel
from api.schema.options import (
    AccessPrograms,
    BackgroundOptions,
    ImageOptions,
    StreamOptions,
    client_metadata_limits,
)
from api.schema.text_format import StructuredOutputs, TextConfig
from api.schema.tools import (
    Tool,
    ToolChoice,
    callable_names,
    check_tool_choice,
    refuse_unserved_tools,
)
from events.request_settings import (
    MAX_PROMPT_CACHE_KEY_CHARS,
    MAX_SAFETY_IDENTIFIER_CHARS,
    MAX_TOOL_CALLS,
    LogitBias,
    MaxOutputTokens,
    MinP,
    Penalty,
    Priority,
    RepetitionPenalty,
    Seed,
    StopStrings,
    Temperature,
    ThinkingTokenBudget,
    TokenIds,
    TopK,
    TopLogprobs,
    TopP,
)

__all__ = ["FieldRejected", "ResponsesRequest"]


class ReasoningConfig(StrictModel):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    # Which earlier reasoning items the template sees, and the execution mode: the
    # reasoning items a client sends are all rendered, and a served model has one mode.
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: str | None = None


class PromptCacheOptions(StrictModel):
    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m", "12h"] | None = None
    comparison_response_id: str | None = None
    prewarm: bool | None = None

    @field_validator("prewarm")
    @classmethod
    def _no_prewarm(cls, value: bool | None) -> bool | None:
        # A prewarm generates nothing; served as a normal request it would generate.
        if value:
            raise ValueError("prewarming the prompt cache without generating is not supported")
        return value


class ContextManagement(StrictModel):
    """`context_management` entries: only compaction, past a token threshold
    (api/lowering/compaction.py)."""

    type: Literal["compaction"]
    # Below 1,000 a compacted input would hardly fit its own summary.
    compact_threshold: int | None = Field(default=None, ge=1_000, le=10_000_000)


class ConversationRef(StrictModel):
    id: str = Field(min_length=1)


INCLUDABLE = ("message.output_text.logprobs", "reasoning.encrypted_content")
# What the official SDK may ask to include for items of tools that run on OpenAI's side
# (search results, code outputs, screenshots) or for image inputs: spate's output never
# holds such items, so asking for their details adds nothing and is no error.
INCLUDABLE_ABSENT = (
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
)


class ResponsesRequest(StrictModel):
    """The settings the request event carries take their types from events/, which
    holds each one's bounds and special values (-1 budgets, -1 top_k, logit_bias keys
    and limits): validated here, they arrive already normalized."""

    model: str = Field(min_length=1)
    input: str | list[RequestInputItem]
    instructions: str | None = None
    stream: bool = False
    store: bool | None = None
    max_output_tokens: MaxOutputTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    seed: Seed | None = None
    stop: StopStrings | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    thinking_token_budget: ThinkingTokenBudget = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: RepetitionPenalty | None = None
    stop_token_ids: TokenIds | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    logit_bias: LogitBias | None = None
    include_reasoning: bool | None = None
    include: list[str] | None = None
    top_logprobs: TopLogprobs | None = None
    truncation: Literal["auto", "disabled"] | None = None
    request_id: str | None = Field(default=None, min_length=1, max_length=200)
    priority: Priority | None = None
    cache_salt: str | None = Field(default=None, min_length=1)
    enable_response_messages: bool | None = None
    session_id: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None
    max_tool_calls: int | None = Field(default=None, ge=1, le=MAX_TOOL_CALLS)
    parallel_tool_calls: bool | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"] | None = None
    prompt_cache_key: str | None = Field(default=None, max_length=MAX_PROMPT_CACHE_KEY_CHARS)
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = Field(default=None, max_length=MAX_SAFETY_IDENTIFIER_CHARS)
    client_metadata: dict[str, str] | None = None
    access_programs: AccessPrograms | None = None
    background_options: BackgroundOptions | None = None
    image: ImageOptions | None = None
    stream_options: StreamOptions | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    structured_outputs: StructuredOutputs | None = None
    context_management: list[ContextManagement] | None = Field(default=None, max_length=1)
    # Stateful fields: honored with the response store on (api/lowering/request_event.py).
    background: bool | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    conversation: str | ConversationRef | None = None

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
        refuse_unknown_item_types(body.get("input"), tags=REQUEST_ITEM_TAGS)
        refuse_unserved_tools(body.get("tools"), body.get("tool_choice"))
        # What is left of the fields the model does not hold is sent at its off value.
        return {name: value for name, value in body.items() if name in cls.model_fields}

    @model_validator(mode="after")
    def _background_window(self) -> ResponsesRequest:
        options = self.background_options
        if options is not None and options.completion_window in ("2h", "8h") and (
            not self.background or self.stream
        ):
            raise FieldRejected(
                "background_options.completion_window",
                f"The '{options.completion_window}' completion window needs background "
                "true and stream false.",
            )
        return self

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
    def _input_not_empty(cls, value: str | list[RequestInputItem]) -> str | list[RequestInputItem]:
        if isinstance(value, list) and not value:
            raise ValueError("input must hold at least one item")
        return value

    @field_validator("include")
    @classmethod
    def _include(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or []:
            if entry not in INCLUDABLE and entry not in INCLUDABLE_ABSENT:
                raise ValueError(f"'{entry}' cannot be included; supported: "
                                 f"{', '.join(INCLUDABLE + INCLUDABLE_ABSENT)}")
        return value

    @field_validator("request_id")
    @classmethod
    def _request_id(cls, value: str | None) -> str | None:
        # The id names the response's NATS subjects, which carry these characters as
        # they are: cancel, resume and the log all find it by the same name.
        if value is not None and not (value.isascii() and all(c.isalnum() or c in "_-" for c in value)):
            raise ValueError("use ASCII letters, digits, '_' and '-' only")
        return value

    @field_validator("client_metadata")
    @classmethod
    def _client_metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return client_metadata_limits(value)

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and len(value) > METADATA_PAIRS.bound:
            raise ValueError(f"metadata holds at most {METADATA_PAIRS.bound} pairs")
        return value
