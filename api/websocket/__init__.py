"""WebSocket mode on /v1/responses: the wire format, a connection's lanes and held chains, and
one response on a socket; the transport beside api/streaming (SSE and JSON)."""
