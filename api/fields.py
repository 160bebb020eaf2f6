"""How spate treats every top-level Responses request field: the one source of truth.

The request model rejects what is listed as rejected before validating the rest, and
docs/api.md is checked against this table by the tests.
"""

from __future__ import annotations

from enum import Enum


class Treatment(str, Enum):
    HONORED = "honored"
    ECHOED = "echoed"
    NO_OP = "accepted no-op"
    REJECTED = "rejected (400)"
    NEEDS_STORE = "needs the store (400 until enabled)"


STORE_ENV = "SPATE_STORE_URL"

FIELDS: dict[str, tuple[Treatment, str]] = {
    "model": (Treatment.HONORED, "must name a served model: unknown 404, no live worker 503"),
    "input": (Treatment.HONORED, "a string, or message items (content a string or input_text/output_text parts)"),
    "instructions": (Treatment.HONORED, "first system message; echoed"),
    "stream": (Treatment.HONORED, "true selects SSE"),
    "max_output_tokens": (Treatment.HONORED, "cap on generated tokens (>= 1); hit: status incomplete"),
    "temperature": (Treatment.HONORED, "[0, 2]; 0 is greedy; echoed"),
    "top_p": (Treatment.HONORED, "(0, 1]; echoed"),
    "top_k": (Treatment.HONORED, "-1 or 0 turn it off"),
    "min_p": (Treatment.HONORED, "[0, 1]"),
    "seed": (Treatment.HONORED, "int64; the same seed gives the same tokens"),
    "stop": (Treatment.HONORED, "a string or a list of non-empty strings; removed from the text"),
    "thinking_token_budget": (Treatment.HONORED, "-1 or absent: unlimited; N >= 0: at most N thinking tokens"),
    "reasoning": (Treatment.HONORED, "effort 'none' turns thinking off, other values on; summary is a no-op; echoed"),
    "chat_template_kwargs": (Treatment.HONORED, "merged over the model's defaults"),
    "metadata": (Treatment.ECHOED, "at most 16 string pairs"),
    "user": (Treatment.ECHOED, ""),
    "text": (Treatment.HONORED, "format 'text' only so far; verbosity is a no-op; echoed"),
    "store": (Treatment.HONORED, "the store is not enabled: the request runs unstored"),
    "background": (Treatment.NEEDS_STORE, f"needs the store ({STORE_ENV})"),
    "previous_response_id": (Treatment.NEEDS_STORE, f"needs the store ({STORE_ENV})"),
}

# Fields of the contract this server does not implement yet: a 400 naming the field,
# never a silent drop.
NOT_YET = (
    "tools", "tool_choice", "parallel_tool_calls", "max_tool_calls", "service_tier",
    "truncation", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "stop_token_ids", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
    "include_stop_str_in_output", "logit_bias", "include_reasoning", "include",
    "top_logprobs", "structured_outputs", "request_id", "priority", "cache_salt",
    "enable_response_messages", "prompt_cache_key", "prompt_cache_options",
    "prompt_cache_retention", "safety_identifier", "session_id", "kv_transfer_params",
    "ec_transfer_params", "vllm_xargs",
)
for _name in NOT_YET:
    FIELDS[_name] = (Treatment.REJECTED, "not supported by this server yet")

# Fields a text-only server without prompt templates cannot honor.
for _name in ("prompt", "previous_input_messages", "media_io_kwargs", "mm_processor_kwargs",
              "watermarking", "conversation", "context_management", "stream_options"):
    FIELDS[_name] = (Treatment.REJECTED, "not supported: text-only server without prompt templates")


def rejection_message(name: str) -> str | None:
    """The 400 message for a field this server refuses, or None when it takes it."""
    treatment, note = FIELDS[name]
    if treatment is Treatment.REJECTED:
        return f"'{name}' is {note}."
    if treatment is Treatment.NEEDS_STORE:
        return f"'{name}' needs the response store; set {STORE_ENV} to enable it."
    return None
