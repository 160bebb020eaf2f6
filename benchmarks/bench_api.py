"""The API process for bench_stream.py: spate's app plus a baseline route that streams
the SYNTHETIC tokens from this same process through the same fold, without NATS."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvicorn  # noqa: E402
from fastapi import Request  # noqa: E402
from sse_starlette import EventSourceResponse, ServerSentEvent  # noqa: E402

from api.app import create_app  # noqa: E402
from api.deps import SHARED_OWNER  # noqa: E402
from api.lowering.accept import accept  # noqa: E402
from api.schema.body import read_request  # noqa: E402
from api.settings import ApiSettings  # noqa: E402
from api.streaming import server_sent_event  # noqa: E402
from benchmarks.synthetic_engine import TOKEN_TEXT  # noqa: E402
from events import GenerationFinished, GenerationStarted, ResponseFold, TokensGenerated, Usage  # noqa: E402
from events.ids import new_response_id  # noqa: E402


def build_app() -> object:
    settings = ApiSettings(max_inflight=4096, key_max_open=4096)
    app = create_app(settings)
    step_interval = float(os.environ.get("SPATE_BENCH_STEP_INTERVAL_S", "0.01"))

    async def direct(request: Request) -> EventSourceResponse:
        body = await read_request(request, settings.max_body_bytes)
        accepted = accept(body, new_response_id(), owner=SHARED_OWNER)
        max_tokens = body.max_output_tokens or 64

        async def events() -> AsyncIterator[ServerSentEvent]:
            state = ResponseFold()
            rid = accepted.response_id
            log = [accepted, GenerationStarted(response_id=rid, seq=1, worker_id="direct", input_tokens=1)]
            for event in log:
                for sse in state.apply(event):
                    yield server_sent_event(sse)
            for index in range(max_tokens):
                await asyncio.sleep(step_interval)
                seq = state.last_seq + 1
                event = TokensGenerated(response_id=rid, seq=seq, channel="text", text=TOKEN_TEXT,
                                        token_ids=(index,))
                if index == max_tokens - 1:
                    batch = state.apply(event) + state.apply(GenerationFinished(
                        response_id=rid, seq=seq + 1, finish_reason="length",
                        usage=Usage(input_tokens=1, output_tokens=max_tokens)))
                else:
                    batch = state.apply(event)
                for sse in batch:
                    yield server_sent_event(sse)

        return EventSourceResponse(events())

    app.add_api_route("/bench/direct", direct, methods=["POST"])  # type: ignore[attr-defined]
    return app


if __name__ == "__main__":
    uvicorn.run(build_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")  # type: ignore[arg-type]
