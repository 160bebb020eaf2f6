"""Each request setting's bounds and special values, defined once.

The request event validates and normalizes with these types, the API's request model
reuses them for its 400s, and the engine imports the limits. A new setting's rule goes
here and nowhere else.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, Strict, WithJsonSchema
from pydantic_core import PydanticCustomError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_TEMPERATURE = 2.0
# Presence and frequency penalties lie in [-PENALTY_LIMIT, PENALTY_LIMIT].
PENALTY_LIMIT = 2.0
# OpenAI's logit_bias range; larger magnitudes would only mean "always" or "never".
LOGIT_BIAS_LIMIT = 100.0
MAX_TOP_LOGPROBS = 20
# Caps on counts a client names. Each lies above anything a served model can use (their
# vocabularies and context windows are far smaller), so no honest request meets one, and a
# huge number never reaches a worker's batch: a top_k past int64 would fail the torch
# call that every sequence of the batch shares.
MAX_TOP_K = 1 << 20
MAX_OUTPUT_TOKENS = 1 << 20
MAX_THINKING_TOKEN_BUDGET = MAX_OUTPUT_TOKENS
MAX_REPETITION_PENALTY = 10.0
# Token ids are vocabulary indices: int32 holds every vocabulary there is.
MAX_TOKEN_ID = 2**31 - 1
# Entries in logit_bias and in stop_token_ids.
MAX_TOKEN_ID_ENTRIES = 1024
# Scheduler priority: lower runs first, 0 is the default. How far below 0 a client may go
# is the API operator's choice (SPATE_PRIORITY_FLOOR, 0 unless raised), so that by default
# nobody can jump ahead of everyone else's requests.
PRIORITY_LIMIT = 1000
# max_tool_calls is echoed only; bounded like every other count a client names.
MAX_TOOL_CALLS = 1024
# Opaque strings a request carries (OpenAI's bounds): the cache key is on the request
# event, the safety identifier is echoed.
MAX_PROMPT_CACHE_KEY_CHARS = 1024
MAX_SAFETY_IDENTIFIER_CHARS = 128
# What a client sends for "no limit on thinking" and for "no top-k" (vLLM's spelling);
# the event carries None and 0 instead, so nothing past it ever sees the sentinel.
OFF_SENTINEL = -1
TOP_K_DISABLED = 0

# The type of an error whose message the contract fixes word for word (SPEC.md): the API
# answers it as is, without its usual "Invalid value for ..." prefix.
FIXED_MESSAGE_ERROR = "fixed_message"
BUDGET_MESSAGE = "`thinking_token_budget` must be a non-negative integer or -1 for unlimited."


def thinking_token_budget_of(value: Any) -> int | None:
    """None (unlimited) for absent or -1; a non-negative int as it is. Booleans and floats
    are refused even where pydantic would coerce them: the contract names integers only."""
    if value is None:
        return None
    if type(value) is not int or value < OFF_SENTINEL:
        raise PydanticCustomError(FIXED_MESSAGE_ERROR, BUDGET_MESSAGE)
    if value > MAX_THINKING_TOKEN_BUDGET:
        raise PydanticCustomError(
            "less_than_equal", "Input should be less than or equal to {le}",
            {"le": MAX_THINKING_TOKEN_BUDGET},
        )
    return None if value == OFF_SENTINEL else value


def _top_k_of(value: int) -> int:
    # -1 (vLLM's "off") and 0 (OpenAI's) mean the same; the event keeps one of them.
    return TOP_K_DISABLED if value == OFF_SENTINEL else value


def _stop_strings_of(value: Any) -> Any:
    # JSON sends one string or an array; the event holds a tuple either way.
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(value)
    raise ValueError("Input should be a string or a list of strings")


def _non_empty(strings: tuple[str, ...]) -> tuple[str, ...]:
    if any(not text for text in strings):
        raise ValueError("stop strings must not be empty")
    return strings


def _token_ids_of(value: Any) -> Any:
    # JSON arrays arrive as lists; the event holds a tuple.
    if isinstance(value, list | tuple):
        return tuple(value)
    raise ValueError("Input should be a valid list")


def _token_ids_in_range(token_ids: tuple[int, ...]) -> tuple[int, ...]:
    if any(token_id < 0 for token_id in token_ids):
        raise ValueError("token ids are non-negative integers")
    if any(token_id > MAX_TOKEN_ID for token_id in token_ids):
        raise ValueError(f"token ids are at most {MAX_TOKEN_ID}")
    if len(token_ids) > MAX_TOKEN_ID_ENTRIES:
        raise ValueError(f"at most {MAX_TOKEN_ID_ENTRIES} token ids")
    return token_ids


def _token_id_keys(value: Any) -> Any:
    """JSON object keys are strings: "17" names token 17. Keys must be non-negative
    integers, written in digits; the dict type below turns them into ints."""
    if isinstance(value, dict) and any(
        not (type(key) is int and key >= 0 or isinstance(key, str) and key.isdigit())
        for key in value
    ):
        raise ValueError("keys must be integer token ids")
    return value


def _clamped(bias: dict[int, float]) -> dict[int, float]:
    if len(bias) > MAX_TOKEN_ID_ENTRIES:
        raise ValueError(f"at most {MAX_TOKEN_ID_ENTRIES} token ids")
    if any(token_id > MAX_TOKEN_ID for token_id in bias):
        raise ValueError(f"token ids are at most {MAX_TOKEN_ID}")
    return {
        token_id: min(max(value, -LOGIT_BIAS_LIMIT), LOGIT_BIAS_LIMIT)
        for token_id, value in bias.items()
    }


# Floats are finite: NaN would slip past every bound (each comparison is false).
Temperature = Annotated[float, Field(ge=0, le=MAX_TEMPERATURE, allow_inf_nan=False)]
TopP = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
# -1 or 0 turn top-k off; both arrive as 0.
TopK = Annotated[int, Field(ge=OFF_SENTINEL, le=MAX_TOP_K), AfterValidator(_top_k_of)]
MinP = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Penalty = Annotated[float, Field(ge=-PENALTY_LIMIT, le=PENALTY_LIMIT, allow_inf_nan=False)]
RepetitionPenalty = Annotated[float, Field(gt=0, le=MAX_REPETITION_PENALTY, allow_inf_nan=False)]
Seed = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
MaxOutputTokens = Annotated[int, Field(ge=1, le=MAX_OUTPUT_TOKENS)]
TopLogprobs = Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)]
Priority = Annotated[int, Field(ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)]
# The JSON schemas below (for /openapi.json) say what the validators take, where the
# types alone would not: one string or several, digit keys, the -1 budget.
_TOKEN_ID_SCHEMA = {"type": "integer", "minimum": 0, "maximum": MAX_TOKEN_ID}
StopStrings = Annotated[
    tuple[str, ...], BeforeValidator(_stop_strings_of), AfterValidator(_non_empty),
    WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1},
                              {"type": "array", "items": {"type": "string", "minLength": 1}}]}),
]
TokenIds = Annotated[
    tuple[int, ...], BeforeValidator(_token_ids_of), AfterValidator(_token_ids_in_range),
    WithJsonSchema({"type": "array", "items": _TOKEN_ID_SCHEMA,
                    "maxItems": MAX_TOKEN_ID_ENTRIES}),
]
# Token id -> bias, clamped to [-LOGIT_BIAS_LIMIT, LOGIT_BIAS_LIMIT]. Keys convert from
# digits even in a strict model (JSON keys are strings); values stay strict.
LogitBias = Annotated[
    dict[Annotated[int, Strict(False)], Annotated[float, Field(allow_inf_nan=False)]],
    BeforeValidator(_token_id_keys),
    AfterValidator(_clamped),
    WithJsonSchema({"type": "object", "maxProperties": MAX_TOKEN_ID_ENTRIES,
                    "propertyNames": {"pattern": "^[0-9]{1,10}$"},
                    "additionalProperties": {"type": "number"}}),
]
# None is unlimited; -1 becomes None; 0 closes a think block at once.
ThinkingTokenBudget = Annotated[
    int | None, BeforeValidator(thinking_token_budget_of),
    WithJsonSchema({"anyOf": [
        {"type": "integer", "minimum": OFF_SENTINEL, "maximum": MAX_THINKING_TOKEN_BUDGET},
        {"type": "null"}]}),
]
