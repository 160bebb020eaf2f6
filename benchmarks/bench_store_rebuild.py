"""How fast `spate store rebuild` refills an empty store: N stored responses of T token
events each are written to a fresh nats-server through the journal (as the API and a
worker write them), then the rebuild folds the whole log into a fresh redis-server.
Prints responses and events per second, and checks every response came back completed.

    .venv/bin/python benchmarks/bench_store_rebuild.py [--responses 1000] [--tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.nats_server import EmbeddedNats  # noqa: E402
from cli.redis_server import EmbeddedRedis  # noqa: E402
from events import (  # noqa: E402
    ChatMessage,
    GenerationFinished,
    GenerationStarted,
    RequestAccepted,
    TokensGenerated,
    Usage,
)
from journal import Journal, JournalSettings  # noqa: E402
from store.rebuild import Rebuild  # noqa: E402
from store.redis_store import RedisStore  # noqa: E402

# Responses written at once (each its own writer, pipelined).
WRITING_AT_ONCE = 64


async def write_response(journal: Journal, response_id: str, tokens: int) -> None:
    request = RequestAccepted(response_id=response_id, seq=0, model="bench", store=True,
                              messages=(ChatMessage(role="user", content="hi"),))
    await journal.publish_request(request)
    writer = journal.writer(response_id, 1, await journal.take_lease(response_id))
    await writer.publish(GenerationStarted, worker_id="bench", input_tokens=1)
    for index in range(tokens):
        await writer.publish(TokensGenerated, channel="text", text=f"t{index} ", token_ids=(index,))
    await writer.publish(GenerationFinished, finish_reason="stop",
                         usage=Usage(input_tokens=1, output_tokens=tokens))
    await writer.flush()


async def run(nats_url: str, redis_url: str, responses: int, tokens: int) -> dict[str, Any]:
    journal = Journal(JournalSettings(nats_url=nats_url), name="spate-bench-rebuild")
    journal.start()
    store = RedisStore(redis_url)
    try:
        if not await journal.wait_connected():
            raise RuntimeError("NATS did not answer")
        ids = [f"resp_rebuild_{index:06d}" for index in range(responses)]
        for start in range(0, responses, WRITING_AT_ONCE):
            await asyncio.gather(*(write_response(journal, rid, tokens)
                                   for rid in ids[start:start + WRITING_AT_ONCE]))
        started = time.perf_counter()
        report = await Rebuild(journal, store).run()
        seconds = time.perf_counter() - started
        complete = 0
        for rid in ids:
            found = await store.get_response(rid)
            complete += found is not None and found.status == "completed"
    finally:
        await store.close()
        await journal.close()
    return {"responses": report.responses, "events": report.events, "seconds": seconds,
            "responses_per_s": report.responses / seconds, "events_per_s": report.events / seconds,
            "complete": complete}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=32, help="token events per response")
    args = parser.parse_args(argv)
    with EmbeddedNats() as nats_server, EmbeddedRedis() as redis_server:
        result = asyncio.run(run(nats_server.url, redis_server.url, args.responses, args.tokens))
    print(f"{result['responses']} responses, {result['events']} events rebuilt in "
          f"{result['seconds']:.2f} s: {result['responses_per_s']:.0f} responses/s, "
          f"{result['events_per_s']:.0f} events/s; {result['complete']} complete")
    return result


if __name__ == "__main__":
    main()
