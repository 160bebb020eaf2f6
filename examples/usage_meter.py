"""Usage metering per model, read from spate's event log: a consumer outside the request
path, through the journal like spate's own processes.

    python -m examples.usage_meter [--nats-url URL] [--from-start]

Its NATS: --nats-url, else SPATE_NATS_URL, else that of a `spate serve` running from
this folder, else nats://127.0.0.1:4222; unreachable for SPATE_NATS_CONNECT_WAIT_S
seconds (10), it says so and exits with status 1.

Each response's `request.accepted` names its model; its `generation.finished` carries its
usage. Every few seconds (and at the end) it prints one line per model.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from dataclasses import dataclass

from cli.log_format import configure_logging
from cli.nats_address import use_nats_address
from cli.settings import CliSettings
from events import GenerationFailed, GenerationFinished, RequestAccepted
from journal import Journal, JournalSettings, JournalUnavailable

UNKNOWN_MODEL = "(unknown)"


@dataclass(slots=True)
class ModelUsage:
    responses: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0


class UsageMeter:
    """A fold of the events stream into usage per model. Idempotent: a response counts once
    whatever is read twice."""

    def __init__(self) -> None:
        self.usage: dict[str, ModelUsage] = {}
        self._model_of: dict[str, str] = {}
        self._ended: set[str] = set()

    def apply(self, event: object) -> None:
        if isinstance(event, RequestAccepted):
            self._model_of[event.response_id] = event.model
            return
        if not isinstance(event, GenerationFinished | GenerationFailed):
            return
        if event.response_id in self._ended:
            return
        self._ended.add(event.response_id)
        model = self._model_of.pop(event.response_id, UNKNOWN_MODEL)
        usage = self.usage.setdefault(model, ModelUsage())
        if isinstance(event, GenerationFailed):
            usage.failed += 1
            return
        usage.responses += 1
        usage.input_tokens += event.usage.input_tokens
        usage.output_tokens += event.usage.output_tokens
        usage.reasoning_tokens += event.usage.reasoning_tokens
        usage.cached_tokens += event.usage.cached_tokens

    def report(self) -> str:
        lines = ["model responses failed input_tokens output_tokens reasoning_tokens cached_tokens"]
        for model, usage in sorted(self.usage.items()):
            lines.append(f"{model} {usage.responses} {usage.failed} {usage.input_tokens} "
                         f"{usage.output_tokens} {usage.reasoning_tokens} {usage.cached_tokens}")
        return "\n".join(lines)


async def run(settings: JournalSettings, from_start: bool, every_s: float, stop: asyncio.Event) -> UsageMeter:
    """The meter once `stop` is set. JournalUnavailable when NATS does not answer within
    `settings.nats_connect_wait_s`."""
    meter = UsageMeter()
    journal = Journal(settings, name="spate-usage-meter", report_retries=False)
    journal.start()
    try:
        if not await journal.wait_connected(stop, settings.nats_connect_wait_s):
            return meter

        async def read() -> None:
            async for message in journal.tail_events(from_start):
                meter.apply(message.event)

        reading = asyncio.create_task(read())
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            print(meter.report(), flush=True)
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        return meter
    finally:
        await journal.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nats-url", default=None)
    parser.add_argument("--from-start", action="store_true",
                        help="count every stored response, not only those from now on")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between reports")
    args = parser.parse_args()
    logs = CliSettings()
    configure_logging(logs.log_level, logs.log_format)
    settings = JournalSettings()
    address = use_nats_address(settings, args.nats_url)

    async def main_async() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run(settings, args.from_start, args.every, stop)

    try:
        asyncio.run(main_async())
    except JournalUnavailable as error:
        logging.getLogger("spate.usage_meter").error("%s", address.unreachable(error))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
