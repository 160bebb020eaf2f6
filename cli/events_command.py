"""`spate events tail` (follow the live event streams) and `spate events asyncapi` (write
or check the event contract as an AsyncAPI document)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

from cli.nats_address import use_nats_address
from events import encode
from events.asyncapi import DEFAULT_PATH, render_asyncapi
from journal import Journal, JournalSettings, JournalUnavailable, TailedMessage

log = logging.getLogger("spate.cli")

TERMINAL_TYPES = ("generation.finished", "generation.failed")


def add_parser(commands: Any) -> None:
    events = commands.add_parser("events", help="the event streams: tail them, or their contract")
    actions = events.add_subparsers(dest="events_command", required=True)
    tail = actions.add_parser(
        "tail", help="print events as they are written: every response's, one model's "
        "requests (--model) or one response's whole log (--response)")
    which = tail.add_mutually_exclusive_group()
    which.add_argument("--model", default=None, help="one model's request events")
    which.add_argument("--response", default=None,
                       help="one response's log from seq 0; stops after its terminal event")
    tail.add_argument("--from-start", action="store_true",
                      help="begin with the oldest stored event instead of the next new one")
    tail.add_argument("--json", action="store_true", help="one event a line as JSON")
    tail.add_argument("--count", type=int, default=None, help="stop after this many events")
    tail.add_argument("--nats-url", default=None,
                      help="default: SPATE_NATS_URL, else the NATS of a `spate serve` "
                      "running from this folder, else nats://127.0.0.1:4222")
    tail.add_argument("--connect-wait", type=float, default=None,
                      help="seconds to wait for NATS before giving up (default: "
                      "SPATE_NATS_CONNECT_WAIT_S, else "
                      f"{JournalSettings.model_fields['nats_connect_wait_s'].default:g})")
    asyncapi = actions.add_parser("asyncapi", help="write the AsyncAPI document of the events")
    asyncapi.add_argument("--output", default=str(DEFAULT_PATH))
    asyncapi.add_argument("--check", action="store_true",
                          help="only compare: exit 1 when the file differs from the models")


def run_events(args: argparse.Namespace) -> int:
    if args.events_command == "asyncapi":
        return write_asyncapi(Path(args.output), args.check)
    wait = {} if args.connect_wait is None else {"nats_connect_wait_s": args.connect_wait}
    settings = JournalSettings(**wait)
    address = use_nats_address(settings, args.nats_url)
    try:
        return asyncio.run(run_tail(settings, args, sys.stdout))
    except JournalUnavailable as error:
        log.error("%s", address.unreachable(error))
        return 1


def write_asyncapi(path: Path, check: bool) -> int:
    document = render_asyncapi()
    if check:
        if not path.exists() or path.read_text() != document:
            print(f"{path} is stale: run `spate events asyncapi`", file=sys.stderr)
            return 1
        return 0
    path.write_text(document)
    return 0


async def run_tail(settings: JournalSettings, args: argparse.Namespace, out: TextIO) -> int:
    """0 once done or stopped; JournalUnavailable when NATS does not answer within
    `settings.nats_connect_wait_s`."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    journal = Journal(settings, name="spate-events-tail", report_retries=False)
    journal.start()
    try:
        if not await journal.wait_connected(stop, settings.nats_connect_wait_s):
            return 0  # stopped before NATS answered
        if args.response:
            messages = journal.tail_response(args.response)
        elif args.model:
            messages = journal.tail_requests(args.model, args.from_start)
        else:
            messages = journal.tail_events(args.from_start)
        printing = asyncio.create_task(print_events(messages, args, out))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({printing, stopping}, return_when=asyncio.FIRST_COMPLETED)
        for task in (printing, stopping):
            task.cancel()
        return 0
    finally:
        await journal.close()


async def print_events(messages: AsyncIterator[TailedMessage], args: argparse.Namespace, out: TextIO) -> None:
    printed = 0
    async for message in messages:
        out.write(event_line(message, args.json) + "\n")
        out.flush()
        printed += 1
        if args.count is not None and printed >= args.count:
            return
        if args.response and message.event is not None and message.event.type in TERMINAL_TYPES:
            return


def event_line(message: TailedMessage, as_json: bool) -> str:
    event = message.event
    if event is None:
        raw = message.data.decode(errors="replace")
        return raw if as_json else f"{message.subject} undecodable ({message.error}): {raw}"
    if as_json:
        return encode(event).decode()
    return f"{event.response_id} {event.seq:>4} {event.type} {summary(event)}".rstrip()


def summary(event: Any) -> str:
    """The few fields of an event a person scanning a stream wants to see."""
    match event.type:
        case "request.accepted":
            return f"model={event.model}"
        case "generation.started":
            return f"worker={event.worker_id} input_tokens={event.input_tokens}"
        case "tokens.generated":
            return f"{event.channel} {event.text!r}"
        case "reasoning.ended":
            return f"cause={event.cause} reasoning_tokens={event.reasoning_tokens}"
        case "tool_call.started":
            return f"{event.call_id} {event.name}"
        case "tool_call.ended":
            return f"{event.call_id} {event.arguments}"
        case "generation.finished":
            usage = event.usage
            return (f"{event.finish_reason} input_tokens={usage.input_tokens} "
                    f"output_tokens={usage.output_tokens}")
        case "generation.failed":
            return f"{event.code}: {event.message}"
        case "cancel.requested":
            return f"reason={event.reason}"
    return ""
