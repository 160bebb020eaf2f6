"""Events a worker writes while it runs a response, and the cancellation the API writes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from events.envelope import Event
from events.request import ToolKind

# "tool_call": the arguments of the function call a tool_call.started opened.
Channel = Literal["reasoning", "text", "tool_call"]
FinishReason = Literal["stop", "length", "cancelled"]


class TokenLogprob(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    token: str
    logprob: float
    top_logprobs: tuple[tuple[str, float], ...] = ()


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    reasoning_tokens: int = Field(default=0, ge=0)
    cached_tokens: int = Field(default=0, ge=0)


class GenerationStarted(Event):
    """A worker took the request; a replacement worker after a crash writes another."""

    type: Literal["generation.started"] = "generation.started"
    v: Literal[1] = 1

    worker_id: str
    input_tokens: int = Field(ge=0)
    resumed_output_tokens: int = Field(default=0, ge=0)
    # The rendered prompt, only when the request set enable_response_messages.
    prompt_text: str | None = None
    prompt_token_ids: tuple[int, ...] | None = None


class TokensGenerated(Event):
    """Text produced by one decode step on one channel, with the token ids behind it.

    The ids let a replacement worker rebuild prompt + output after a crash; the text is
    what clients see (it may lag the ids while a UTF-8 character or stop string is open).
    """

    type: Literal["tokens.generated"] = "tokens.generated"
    v: Literal[1] = 1

    channel: Channel
    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[TokenLogprob, ...] | None = None


class ReasoningEnded(Event):
    """The think block closed: the model wrote the end marker, or the budget forced it."""

    type: Literal["reasoning.ended"] = "reasoning.ended"
    # v2: `cause` "model" became "end_marker" (events.codec upcasts v1).
    v: Literal[2] = 2

    # "end_marker": the model wrote the end marker; "budget": thinking_token_budget forced it.
    cause: Literal["end_marker", "budget"]
    reasoning_tokens: int = Field(ge=0)


class ToolCallStarted(Event):
    """The answer began a function call. Its arguments follow as tokens.generated on channel
    "tool_call" until tool_call.ended."""

    type: Literal["tool_call.started"] = "tool_call.started"
    v: Literal[1] = 1

    call_id: str
    # The function's own name; `namespace` names the namespace tool holding it, if any.
    name: str
    namespace: str | None = None
    # A custom tool's call streams its input text; a built-in's becomes its own item type.
    kind: ToolKind = "function"


class ToolCallEnded(Event):
    """The function call closed; `arguments` is its whole JSON text, the joined deltas."""

    type: Literal["tool_call.ended"] = "tool_call.ended"
    v: Literal[1] = 1

    call_id: str
    arguments: str


class GenerationFinished(Event):
    """The terminal event of a response that ran to an end (including cancellation)."""

    type: Literal["generation.finished"] = "generation.finished"
    v: Literal[1] = 1

    finish_reason: FinishReason
    usage: Usage
    # The whole output as the model wrote it (markers included), only when the request
    # set enable_response_messages; its token ids are those of the tokens.generated events.
    raw_output_text: str | None = None


class GenerationFailed(Event):
    """The terminal event of a response that could not be completed."""

    type: Literal["generation.failed"] = "generation.failed"
    v: Literal[1] = 1

    code: str
    message: str
    param: str | None = None


class CancelRequested(Event):
    """Written by the API (client gone, or POST .../cancel) on the response's cancel subject."""

    type: Literal["cancel.requested"] = "cancel.requested"
    v: Literal[1] = 1

    reason: Literal["client_disconnected", "requested"] = "requested"
