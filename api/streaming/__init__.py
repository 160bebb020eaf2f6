"""Serving a response's events: the fold of its log (`LiveResponse`, which any transport
reads), orphan detection, and the SSE and JSON replies with a shutdown's drain."""

from api.streaming.json_reply import background_reply, json_reply
from api.streaming.live_response import LiveResponse, cut_notice_after, open_live_response
from api.streaming.orphans import local_failure, orphaned
from api.streaming.sse import (
    CuttableStream,
    cut_event,
    live_sse_reply,
    resumed_sse_reply,
    server_sent_event,
)

__all__ = [
    "CuttableStream",
    "LiveResponse",
    "background_reply",
    "cut_event",
    "cut_notice_after",
    "json_reply",
    "live_sse_reply",
    "local_failure",
    "open_live_response",
    "orphaned",
    "resumed_sse_reply",
    "server_sent_event",
]
