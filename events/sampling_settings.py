"""How a request's tokens are chosen and when its generation stops, as the request event
carries them: validated and normalized by the types in events/request_settings.py, so
the engine takes them as they are."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from events.request_settings import (
    LogitBias,
    MaxOutputTokens,
    MinP,
    Penalty,
    RepetitionPenalty,
    Seed,
    StopStrings,
    Temperature,
    TokenIds,
    TopK,
    TopLogprobs,
    TopP,
)


class SamplingSettings(BaseModel):
    """Resolved sampling values; the defaults are the ones echoed on the Response.

    The engine reads this object as it is (SamplingParams.sampling, in
    workers/engine/sampling_params.py), so each setting is defined here alone.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    temperature: Temperature = 1.0
    top_p: TopP = 1.0
    # 0 is off (a client's -1 arrives as 0).
    top_k: TopK = 0
    min_p: MinP = 0.0
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    repetition_penalty: RepetitionPenalty = 1.0
    seed: Seed | None = None
    stop: StopStrings = ()
    stop_token_ids: TokenIds = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    # Token id -> bias, clamped to [-100, 100].
    logit_bias: LogitBias = Field(default_factory=dict)
    # None generates until a stop condition or the context length.
    max_output_tokens: MaxOutputTokens | None = None
    # Alternatives per token when logprobs were asked for; None: no logprobs at all.
    top_logprobs: TopLogprobs | None = None
