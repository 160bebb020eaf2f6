"""The HTTP server's own bounds against a real API process (and the session's
nats-server): bodies refused as they are read, chunked or not; request heads with a
deadline; connections at once; a warning when the API is open beyond this machine."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from cli.nats_server import EmbeddedNats, free_port
from tests.processes import SpateProcess, wait_for, wait_http

MAX_BODY = 64 * 1024
HEAD_TIMEOUT_S = 1.0
MAX_CONNECTIONS = 8


@pytest.fixture(scope="module")
def bounded_api(nats_server: EmbeddedNats) -> Iterator[tuple[SpateProcess, int]]:
    port = free_port()
    api = SpateProcess(["api", "--host", "0.0.0.0", "--port", str(port)],
                       {"SPATE_NATS_URL": nats_server.url, "SPATE_MAX_BODY_BYTES": str(MAX_BODY),
                        "SPATE_HTTP_HEAD_TIMEOUT_S": str(HEAD_TIMEOUT_S),
                        "SPATE_HTTP_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
                        "SPATE_API_KEYS": ""}, "bounded-api")
    try:
        wait_http(f"http://127.0.0.1:{port}/health", api, timeout=60)
        yield api, port
    finally:
        api.stop()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def read_reply(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def read_one(sock: socket.socket) -> bytes:
    """One response (head and Content-Length body) on a connection that stays open."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                  if line.startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_a_chunked_body_is_refused_once_past_the_bound(bounded_api: tuple[SpateProcess, int]) -> None:
    _, port = bounded_api
    with connect(port) as sock:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: spate\r\n"
                     b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b" " * 16384
        for _ in range(MAX_BODY // len(piece) + 1):  # one piece past the bound
            sock.sendall(chunk(piece))
        # The body is not finished (no last chunk, and a client could send on for ever):
        # the answer cannot have waited for it. The server never reads past the bound and
        # closes the connection after answering, so a client still sending more than this
        # would see it reset.
        reply = read_reply(sock)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"connection: close" in head.lower()
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_a_declared_length_past_the_bound_is_refused_before_the_body(
    bounded_api: tuple[SpateProcess, int],
) -> None:
    _, port = bounded_api
    with connect(port) as sock:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: spate\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                     % (64 * 1024 * 1024))
        reply = read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]


def test_a_trickled_request_head_is_cut_at_its_deadline(bounded_api: tuple[SpateProcess, int]) -> None:
    _, port = bounded_api
    with connect(port) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: spate\r\n")
        for _ in range(20):  # a header line every half second, never the blank line
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    break
            except BlockingIOError:
                pass
            except OSError:
                break
            time.sleep(0.5)
        closed_after = time.monotonic() - started
    assert closed_after < HEAD_TIMEOUT_S + 3


def test_a_connection_keeps_its_head_deadline_across_requests(
    bounded_api: tuple[SpateProcess, int],
) -> None:
    _, port = bounded_api
    with connect(port) as sock:
        for _ in range(3):  # each request's head arrives in time: the connection lives on
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: spate\r\n\r\n")
            assert read_one(sock).startswith(b"HTTP/1.1 200")
            time.sleep(HEAD_TIMEOUT_S / 2)


def test_connections_past_the_bound_get_503s(bounded_api: tuple[SpateProcess, int]) -> None:
    _, port = bounded_api
    held = [connect(port) for _ in range(MAX_CONNECTIONS)]
    try:
        with connect(port) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: spate\r\nConnection: close\r\n\r\n")
            assert read_reply(sock).startswith(b"HTTP/1.1 503")
    finally:
        for sock in held:
            sock.close()
    assert wait_for(lambda: probe(port).startswith(b"HTTP/1.1 200"), timeout=10)


def probe(port: int) -> bytes:
    with connect(port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: spate\r\nConnection: close\r\n\r\n")
        return read_reply(sock)


def test_listening_beyond_loopback_without_keys_warns(bounded_api: tuple[SpateProcess, int]) -> None:
    api, _ = bounded_api
    assert "SPATE_API_KEYS is empty" in api.output()
