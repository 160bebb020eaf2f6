"""A SYNTHETIC token source for benchmarks only: it emits fixed tokens at a fixed step
interval, so bench_stream.py measures the serving path (API, NATS, worker) alone.
Never used by `spate serve` or any test."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from events import ModelCard, RequestAccepted
from workers.engine.llm_engine import RequestOutput
from workers.engine.output_state import Delta
from workers.served_model import Prompt, check_served_model

SYNTHETIC_MODEL = "synthetic-bench"
TOKEN_TEXT = " tok"


@dataclass(slots=True)
class _Stream:
    prompt_tokens: int
    max_tokens: int
    generated: int = 0
    cancelled: bool = False


class SyntheticTokenEngine:
    """The engine interface of workers/engine (add_request, cancel, step,
    has_unfinished_requests) with no model behind it."""

    def __init__(self, step_interval_s: float) -> None:
        self.step_interval_s = step_interval_s
        self.max_model_len = 1 << 20
        self._streams: dict[str, _Stream] = {}

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: Any,
                    output_token_ids: Any = (), prompt_opens_reasoning: bool = False) -> None:
        self._streams[request_id] = _Stream(len(prompt_token_ids), params.max_output_tokens or 64,
                                            len(output_token_ids))

    def cancel(self, request_id: str) -> bool:
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.cancelled = True
        return stream is not None

    def has_unfinished_requests(self) -> bool:
        return bool(self._streams)

    def step(self) -> list[RequestOutput]:
        time.sleep(self.step_interval_s)
        outputs = []
        for request_id, stream in list(self._streams.items()):
            finished = stream.cancelled or stream.generated + 1 >= stream.max_tokens
            deltas = [] if stream.cancelled else [Delta("text", TOKEN_TEXT, [stream.generated])]
            stream.generated += 0 if stream.cancelled else 1
            if finished:
                del self._streams[request_id]
            outputs.append(RequestOutput(
                request_id=request_id, deltas=deltas,
                new_token_ids=[] if stream.cancelled else [stream.generated],
                reasoning_ended=None, finished=finished,
                finish_reason=("cancelled" if stream.cancelled else "length") if finished else None,
                num_prompt_tokens=stream.prompt_tokens, num_output_tokens=stream.generated,
                num_reasoning_tokens=0, num_cached_tokens=0,
            ))
        return outputs


@dataclass(slots=True)
class _Params:
    max_output_tokens: int | None


class SyntheticServedModel:
    """A ServedModel (workers/served_model.py) by shape: the worker passes it where that
    protocol is typed, and `check_served_model` runs here and at the worker's load, so a
    member the worker starts to use and this lacks fails at once, not as a hung request."""

    def __init__(self, step_interval_s: float, worker_id: str) -> None:
        self.engine = SyntheticTokenEngine(step_interval_s)
        self.card = ModelCard(name=SYNTHETIC_MODEL, context_length=self.engine.max_model_len,
                              worker_id=worker_id, created_at=time.time())
        check_served_model(self)

    def build_prompt(self, request: RequestAccepted) -> Prompt:
        words = sum(len(message.content.split()) for message in request.messages)
        return Prompt(list(range(words)), opens_reasoning=False)

    def sampling_params(self, request: RequestAccepted) -> _Params:
        return _Params(request.sampling.max_output_tokens)

    def token_text(self, token_id: int) -> str:
        return TOKEN_TEXT

    def decode(self, token_ids: list[int]) -> str:
        return TOKEN_TEXT * len(token_ids)
