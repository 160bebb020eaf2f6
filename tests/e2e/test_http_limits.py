"""The HTTP server's own bounds against a real API process (and the session's
nats-server): bodies refused as they are read, chunked or not; request heads with a
deadline and a size, however they arrive; idle keep-alive connections closed;
connections at once; a warning when the API is open beyond this machine."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from cli.nats_server import EmbeddedNats, free_port
from tests.processes import SpateProcess, wait_for, wait_http

MAX_BODY = 64 * 1024
HEAD_TIMEOUT_S = 2.5
MAX_CONNECTIONS = 8
MAX_HEAD = 4096
KEEP_ALIVE_S = 1


@pytest.fixture(scope="module")
def bounded_api(nats_server: EmbeddedNats) -> Iterator[tuple[SpateProcess, int]]:
    port = free_port()
    api = SpateProcess(["api", "--host", "0.0.0.0", "--port", str(port)],
                       {"SPATE_NATS_URL": nats_server.url, "SPATE_MAX_BODY_BYTES": str(MAX_BODY),
                        "SPATE_HTTP_HEAD_TIMEOUT_S": str(HEAD_TIMEOUT_S),
                        "SPATE_HTTP_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
                        "SPATE_HTTP_MAX_HEAD_BYTES": str(MAX_HEAD),
                        "SPATE_HTTP_KEEP_ALIVE_S": str(KEEP_ALIVE_S),
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
        # Each request's head arrives in time (and within the keep-alive): the connection
        # lives on past its first deadline.
        for _ in range(int(2 * HEAD_TIMEOUT_S / (KEEP_ALIVE_S / 2)) + 1):
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: spate\r\n\r\n")
            assert read_one(sock).startswith(b"HTTP/1.1 200")
            time.sleep(KEEP_ALIVE_S / 2)  # the point: idle, but within the keep-alive


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


def head_of(size: int, *, header: bytes = b"") -> bytes:
    """A GET /health head of exactly `size` bytes (`header` among its headers), padded
    with 64-byte headers and one last header as long as it takes."""
    start = b"GET /health HTTP/1.1\r\nHost: spate\r\n" + header
    room = size - len(start) - 2
    lines = []
    while room >= 64 + 10:
        lines.append(b"X-Pad-%04d: %s\r\n" % (len(lines), b"p" * 50))
        room -= 64
    lines.append(b"X-Last: " + b"p" * (room - 10) + b"\r\n")
    head = start + b"".join(lines) + b"\r\n"
    assert len(head) == size, (len(head), size)
    return head


def assert_head_refused(reply: bytes) -> None:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), reply[:300]
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "request_head_too_large"
    assert error["type"] == "invalid_request_error"
    assert "SPATE_HTTP_MAX_HEAD_BYTES" in error["message"] and str(MAX_HEAD) in error["message"]


def send_pieces(sock: socket.socket, data: bytes, piece: int) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for start in range(0, len(data), piece):
        sock.sendall(data[start:start + piece])


def test_a_head_at_the_bound_is_served(bounded_api: tuple[SpateProcess, int]) -> None:
    _, port = bounded_api
    for pieces in (None, 64):
        with connect(port) as sock:
            head = head_of(MAX_HEAD, header=b"Connection: close\r\n")
            send_pieces(sock, head, pieces or len(head))
            assert read_reply(sock).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("shape", ["many headers", "one huge header", "long request line"])
def test_a_head_past_the_bound_in_one_write_is_refused(
    bounded_api: tuple[SpateProcess, int], shape: str,
) -> None:
    # The case that once got a 200: the whole head in one read, where h11's own bound
    # (on an event still incomplete after a read) never looked at it.
    _, port = bounded_api
    size = 70_000
    head = {
        "many headers": head_of(size),
        "one huge header": b"GET /health HTTP/1.1\r\nHost: spate\r\nX-Big: "
                           + b"b" * (size - 46) + b"\r\n\r\n",
        "long request line": b"GET /health?q=" + b"q" * (size - 40)
                             + b" HTTP/1.1\r\nHost: spate\r\n\r\n",
    }[shape]
    assert len(head) == size
    with connect(port) as sock:
        sock.sendall(head)
        assert_head_refused(read_reply(sock))


def test_a_head_one_byte_past_the_bound_is_refused(bounded_api: tuple[SpateProcess, int]) -> None:
    _, port = bounded_api
    with connect(port) as sock:
        sock.sendall(head_of(MAX_HEAD + 1))
        assert_head_refused(read_reply(sock))


def test_a_head_past_the_bound_in_many_writes_is_refused(bounded_api: tuple[SpateProcess, int]) -> None:
    _, port = bounded_api
    with connect(port) as sock:
        # Complete, a byte past the bound, in 64-byte writes.
        send_pieces(sock, head_of(MAX_HEAD + 1), 64)
        assert_head_refused(read_reply(sock))


def test_an_unfinished_head_is_refused_once_past_the_bound(bounded_api: tuple[SpateProcess, int]) -> None:
    # A head that never ends: the answer comes once the bytes pass the bound, so the
    # server holds no more than that of it. The last write is the one that passes it
    # (nothing follows that could meet a closed socket).
    _, port = bounded_api
    endless = head_of(8 * MAX_HEAD)[:-2]
    with connect(port) as sock:
        send_pieces(sock, endless[:MAX_HEAD + 1], 256)
        assert_head_refused(read_reply(sock))


def test_a_pipelined_head_past_the_bound_is_refused_after_the_first(
    bounded_api: tuple[SpateProcess, int],
) -> None:
    _, port = bounded_api
    with connect(port) as sock:
        sock.sendall(head_of(200) + head_of(2 * MAX_HEAD))
        replies = read_reply(sock)
    first, _, second = replies.partition(b'{"status":"ok"}')
    assert first.startswith(b"HTTP/1.1 200"), replies[:300]
    assert_head_refused(second)


def test_an_idle_keep_alive_connection_is_closed(bounded_api: tuple[SpateProcess, int]) -> None:
    # SPATE_HTTP_KEEP_ALIVE_S is shorter than the head deadline here, which would close an
    # idle connection too, and says so in the log: the keep-alive closes it silently.
    api, port = bounded_api
    deadline_line = "sent no complete request head"
    with connect(port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: spate\r\n\r\n")
        assert read_one(sock).startswith(b"HTTP/1.1 200")
        deadlines_before = api.output().count(deadline_line)
        assert sock.recv(1) == b""
    assert api.output().count(deadline_line) == deadlines_before
