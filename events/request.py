"""The normalized request event: what the API accepted, lowered for workers to run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from events.envelope import Event


class ChatMessage(BaseModel):
    """One turn of the conversation, ready for a chat template."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str


class SamplingSettings(BaseModel):
    """Resolved sampling values; the defaults are the ones echoed on the Response."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    # Token id -> bias, already clamped to [-100, 100].
    logit_bias: dict[int, float] = Field(default_factory=dict)
    max_output_tokens: int | None = None
    # Alternatives per token when logprobs were asked for; None: no logprobs at all.
    top_logprobs: int | None = None


class RequestAccepted(Event):
    """Published once per response: seq 0 of its event log and one message on REQUESTS.

    `thinking_token_budget` is None for an unlimited budget (the API lowers absent and
    -1 to None), otherwise the number of tokens allowed inside a think block.
    `echo` holds the request fields the Response object repeats back verbatim.
    """

    type: Literal["request.accepted"] = "request.accepted"
    v: Literal[1] = 1

    model: str
    messages: tuple[ChatMessage, ...]
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    thinking_token_budget: int | None = Field(default=None, ge=0)
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    stream: bool = False
    # "auto" drops the oldest turns to fit the context; "disabled" fails a long input.
    truncation: Literal["auto", "disabled"] = "disabled"
    include_reasoning: bool = True
    enable_response_messages: bool = False
    # Scheduling and cache isolation.
    priority: int = 0
    cache_salt: str | None = None
    # Routing hint and opaque pass-through for disaggregated deployments.
    session_id: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None
    echo: dict[str, Any] = Field(default_factory=dict)
