"""Streams that last many keep-alive intervals, read to their end by every kind of SSE
client: the official SDK (a stream being created, and one attached to a background
response), the Agents SDK, LangChain and a plain spec-following reader. The API here
sends a keep-alive after PING_S quiet seconds, and each test proves from the bytes its
client read that keep-alives went out between two events, after an `id:` line: the
case where sse-starlette's ping made the SDK's decoder dispatch an empty event and fail.
A client that goes mid-stream leaves one quiet log line, no traceback."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI, OpenAI
from openai._streaming import SSEDecoder

from cli.nats_server import free_port
from cli.redis_server import EmbeddedRedis
from events import TERMINAL_SSE_TYPES
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.test_sdk import check_stream_invariants
from tests.processes import SpateProcess, wait_for, wait_http

PING_S = 0.01
KEEPALIVE_LINE = b": keep-alive"


@pytest.fixture(scope="module")
def pinging_api(stack: Stack) -> Iterator[tuple[str, SpateProcess]]:
    """An API replica with the store on that sends keep-alives after PING_S quiet
    seconds, its log in plain text."""
    with EmbeddedRedis() as redis:
        port = free_port()
        api = SpateProcess(["api", "--port", str(port)],
                           {"SPATE_NATS_URL": stack.nats_url, "SPATE_STORE_URL": redis.url,
                            "SPATE_SSE_PING_S": str(PING_S), "SPATE_LOG_FORMAT": "text"},
                           "pinging-api")
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_http(f"{base_url}/ready", api, timeout=60)
            yield base_url, api
        finally:
            api.stop()
    assert not problems_in(api.output()), api.output()[-4000:]


def problems_in(log: str) -> list[str]:
    return [line for line in log.splitlines()
            if "Traceback" in line or "unhandled error" in line or "RuntimeError" in line]


def instructions(label: str) -> str:
    """A long system prompt no other request shares (`label` tells them apart), so that
    each response starts with a prompt to read, quiet after `response.in_progress`,
    however fast the model decodes. Greedy answers to it are the same run after run."""
    notes = " ".join(f"Note {label}-{i}: the archive keeps a copy of letter {i}." for i in range(30))
    return f"{notes}\nIgnore the notes above. Answer the user briefly."


def keepalives_between_events(raw: bytes) -> int:
    """Keep-alive lines after the first `id:` line and before the last one."""
    lines = re.split(rb"\r\n|\r|\n", raw)
    ids = [i for i, line in enumerate(lines) if line.startswith(b"id:")]
    assert ids, raw[:500]
    assert all(line == KEEPALIVE_LINE for line in lines if line.startswith(b":"))
    return sum(line == KEEPALIVE_LINE for line in lines[ids[0]:ids[-1]])


def spec_events(raw: bytes) -> list[dict[str, Any]]:
    """The events the WHATWG event-stream algorithm dispatches from `raw`: a blank line
    dispatches the fields gathered since the last one when they hold data; comment lines
    are skipped; an unterminated last line is dropped."""
    events, data, kind, last_id = [], [], "", None
    for line in re.split(r"\r\n|\r|\n", raw.decode())[:-1]:
        if not line:
            if data:
                events.append({"event": kind or "message", "data": "\n".join(data), "id": last_id})
            data, kind = [], ""
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            elif name == "event":
                kind = value
            elif name == "id":
                last_id = value
    return events


class Recorded(httpx2.SyncByteStream):
    def __init__(self, stream: Any, into: bytearray) -> None:
        self._stream, self._into = stream, into

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            self._into.extend(chunk)
            yield chunk

    def close(self) -> None:
        self._stream.close()


class RecordingTransport(httpx2.BaseTransport):
    """The SDKs' HTTP transport, keeping the bytes of every body it reads."""

    def __init__(self) -> None:
        self._inner = httpx2.HTTPTransport()
        self.bodies: list[bytearray] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._inner.handle_request(request)
        self.bodies.append(bytearray())
        return httpx2.Response(response.status_code, headers=response.headers,
                               stream=Recorded(response.stream, self.bodies[-1]),
                               extensions=response.extensions, request=request)

    def streamed(self) -> bytes:
        """The body of the one SSE reply read."""
        streams = [bytes(body) for body in self.bodies if b"\nevent: " in body]
        assert len(streams) == 1, [body[:200] for body in self.bodies]
        return streams[0]


class AsyncRecorded(httpx2.AsyncByteStream):
    def __init__(self, stream: Any, into: bytearray) -> None:
        self._stream, self._into = stream, into

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._into.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class AsyncRecordingTransport(httpx2.AsyncBaseTransport):
    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self.bodies: list[bytearray] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        self.bodies.append(bytearray())
        return httpx2.Response(response.status_code, headers=response.headers,
                               stream=AsyncRecorded(response.stream, self.bodies[-1]),
                               extensions=response.extensions, request=request)

    streamed = RecordingTransport.streamed


def sdk(base_url: str, transport: RecordingTransport) -> OpenAI:
    return OpenAI(base_url=f"{base_url}/v1", api_key="unused", _strict_response_validation=True,
                  timeout=120, http_client=httpx2.Client(transport=transport))


def test_a_spec_reader_and_the_sdk_decoder_read_every_event(pinging_api: tuple[str, SpateProcess]) -> None:
    base_url, _ = pinging_api
    body = {"model": DEFAULT_MODEL, "instructions": instructions("reader"), "stream": True,
            "input": "Tell me a long story about a lighthouse.", "max_output_tokens": 24,
            "temperature": 0}
    with httpx.stream("POST", f"{base_url}/v1/responses", json=body, timeout=120) as reply:
        assert reply.status_code == 200
        raw = reply.read()
    assert keepalives_between_events(raw) > 0, raw[:2000]

    events = spec_events(raw)
    assert events[-1]["data"] == "[DONE]"
    payloads = [json.loads(event["data"]) for event in events[:-1]]
    assert [event["id"] for event in events[:-1]] == [str(n) for n in range(len(payloads))]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert [event["event"] for event in events[:-1]] == [p["type"] for p in payloads]
    assert payloads[-1]["type"] in TERMINAL_SSE_TYPES
    # The decoder the official SDK and httpx-sse share reads the same events, none empty.
    decoded = list(SSEDecoder().iter_bytes(iter([raw])))
    assert [(sse.event, sse.data) for sse in decoded] == [
        (event["event"] if event["data"] != "[DONE]" else None, event["data"]) for event in events
    ]

    # Resuming by Last-Event-ID: the events after it, framed the same way.
    response_id, after = payloads[0]["response"]["id"], len(payloads) // 2
    with httpx.stream("GET", f"{base_url}/v1/responses/{response_id}", params={"stream": "true"},
                      headers={"Last-Event-ID": str(after)}, timeout=120) as reply:
        resumed = spec_events(reply.read())
    assert [json.loads(event["data"]) for event in resumed[:-1]] == payloads[after + 1:]


def test_the_sdk_reads_a_long_created_stream(pinging_api: tuple[str, SpateProcess]) -> None:
    transport = RecordingTransport()
    events = list(sdk(pinging_api[0], transport).responses.create(
        model=DEFAULT_MODEL, instructions=instructions("created"), stream=True,
        input="Tell me a long story about a lighthouse.", max_output_tokens=24, temperature=0,
    ))
    final = check_stream_invariants(events)
    raw = transport.streamed()
    assert keepalives_between_events(raw) > 0
    assert len(events) == raw.count(b"\nid: ") + raw.startswith(b"id: ")
    assert final.output_text


def test_the_sdk_attaches_to_a_background_response(pinging_api: tuple[str, SpateProcess]) -> None:
    transport = RecordingTransport()
    client = sdk(pinging_api[0], transport)
    queued = client.responses.create(
        model=DEFAULT_MODEL, instructions=instructions("attached"), background=True,
        input="Tell me a long story about a lighthouse.", max_output_tokens=24, temperature=0,
    )
    with client.responses.stream(response_id=queued.id) as stream:
        events = list(stream)
    final = check_stream_invariants(events)
    assert final.id == queued.id and final.output_text
    assert keepalives_between_events(transport.streamed()) > 0

    # Attached again after event 5 (starting_after), it gets the rest, the same events.
    with client.responses.stream(response_id=queued.id, starting_after=5) as stream:
        rest = list(stream)
    assert [event.model_dump() for event in rest] == [event.model_dump() for event in events[6:]]


def test_the_agents_sdk_streams_a_run(pinging_api: tuple[str, SpateProcess]) -> None:
    set_tracing_disabled(True)  # traces would go to a hosted service
    transport = AsyncRecordingTransport()

    async def run() -> tuple[list[Any], Any]:
        client = AsyncOpenAI(base_url=f"{pinging_api[0]}/v1", api_key="unused", timeout=120,
                             http_client=httpx2.AsyncClient(transport=transport))
        # Greedy, the model finishes this answer (the Agents SDK fails an incomplete one).
        agent = Agent(name="greeter", instructions=instructions("agent"),
                      model=OpenAIResponsesModel(model=DEFAULT_MODEL, openai_client=client),
                      model_settings=ModelSettings(temperature=0, max_tokens=200))
        run = Runner.run_streamed(agent, "Say hello in exactly 3 words.")
        events = [event.data async for event in run.stream_events()
                  if event.type == "raw_response_event"]
        return events, run.final_output

    events, final_output = asyncio.run(run())
    assert isinstance(final_output, str) and final_output
    assert events[-1].type == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert keepalives_between_events(transport.streamed()) > 0


def test_langchain_streams_through_the_responses_api(pinging_api: tuple[str, SpateProcess]) -> None:
    transport = RecordingTransport()
    chat = ChatOpenAI(model=DEFAULT_MODEL, base_url=f"{pinging_api[0]}/v1", api_key="unused",
                      use_responses_api=True, temperature=0, max_tokens=24, timeout=120,
                      http_client=httpx2.Client(transport=transport))
    chunks = list(chat.stream([("system", instructions("langchain")),
                               ("user", "Tell me a long story about a lighthouse.")]))
    raw = transport.streamed()
    assert keepalives_between_events(raw) > 0
    text = "".join(chunk.text for chunk in chunks)
    deltas = [json.loads(event["data"]) for event in spec_events(raw)[:-1]]
    assert text and text == "".join(d["delta"] for d in deltas if d["type"] == "response.output_text.delta")


def stream_until_keepalives(reply: httpx.Response) -> bytes:
    """Read a stream until a keep-alive has come between two of its events; the bytes
    read so far."""
    raw = b""
    for chunk in reply.iter_raw():
        raw += chunk
        if b"\nid: " in raw and keepalives_between_events(raw) > 0:
            return raw
    raise AssertionError(f"the stream ended before any keep-alive: {raw[-500:]!r}")


def goes_quietly(api: SpateProcess, response_id: str, log_from: int) -> None:
    """The API logs one line for a client gone from `response_id`'s stream, no error."""
    line = f"the client of {response_id} went before the end of its stream"
    assert wait_for(lambda: line in api.output()[log_from:], 30), api.output()[log_from:][-3000:]
    log = api.output()[log_from:]
    assert log.count(line) == 1 and not problems_in(log), log[-4000:]


def test_a_client_that_goes_mid_stream_leaves_one_quiet_line(pinging_api: tuple[str, SpateProcess]) -> None:
    base_url, api = pinging_api
    log_from = len(api.output())
    body = {"model": DEFAULT_MODEL, "instructions": instructions("gone"), "stream": True,
            "input": "Tell me a long story about a lighthouse.", "max_output_tokens": 400}
    with httpx.stream("POST", f"{base_url}/v1/responses", json=body, timeout=120) as reply:
        raw = stream_until_keepalives(reply)
    response_id = json.loads(spec_events(raw)[0]["data"])["response"]["id"]
    goes_quietly(api, response_id, log_from)
    # Its generation is cancelled (it was no background response).
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", timeout=60)
    assert wait_for(lambda: client.responses.retrieve(response_id).status == "cancelled", 30)


def test_a_client_that_leaves_an_attached_stream_leaves_one_quiet_line(
    pinging_api: tuple[str, SpateProcess],
) -> None:
    base_url, api = pinging_api
    log_from = len(api.output())
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", timeout=60)
    queued = client.responses.create(
        model=DEFAULT_MODEL, instructions=instructions("gone-attached"), background=True,
        input="Tell me a long story about a lighthouse.", max_output_tokens=30, temperature=0,
    )
    with httpx.stream("GET", f"{base_url}/v1/responses/{queued.id}", params={"stream": "true"},
                      timeout=120) as reply:
        stream_until_keepalives(reply)
    goes_quietly(api, queued.id, log_from)
    # A background response goes on without its reader.
    assert wait_for(lambda: client.responses.retrieve(queued.id).status in ("completed", "incomplete"),
                    60)
