"""Settings of the API process, read from SPATE_* environment variables."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from api.tool_policy import ServerToolPolicy
from events.request_settings import PRIORITY_LIMIT
from journal import JournalSettings
from store.base import DEFAULT_TTL_S


class ApiSettings(JournalSettings):
    model_config = SettingsConfigDict(env_prefix="SPATE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # Comma-separated keys; empty means no authentication.
    api_keys: str = ""
    # A request body past this is a 413, chunked or not, and is not read further.
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    # The largest file an input_file part may carry, decoded (api/input_files.py).
    max_file_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    # The HTTP server's own bounds (api/http_limits.py): connections at once (past it, a
    # 503 before the app sees the request), seconds a request head may take to arrive,
    # seconds an idle keep-alive connection is kept, and the size of a request head.
    http_max_connections: int = Field(default=1024, ge=1)
    http_head_timeout_s: float = Field(default=10.0, gt=0)
    http_keep_alive_s: int = Field(default=5, ge=1)
    http_max_head_bytes: int = Field(default=16 * 1024, ge=1024)
    # Responses this replica may have open at once; past it, 429 with Retry-After.
    max_inflight: int = Field(default=256, ge=1)
    # Per API key (one shared owner when keys are off); past each, 429 with Retry-After.
    # Responses one key holds open on this replica: streaming, non-streaming, and
    # background ones a client is streaming.
    key_max_open: int = Field(default=64, ge=1)
    # Background responses of one key not yet ended (queued or running), counted in the
    # store so every replica shares the bound.
    key_max_background: int = Field(default=64, ge=1)
    # Resumed streams (GET /v1/responses/{id}?stream=true) one key holds on this replica.
    key_max_resumes: int = Field(default=64, ge=1)
    # A background slot whose response's end the store never saw is freed after this long.
    background_slot_ttl_s: int = Field(default=3600, ge=60)
    # A keep-alive comment goes out on an SSE stream quiet for this long (the model queued,
    # or a prompt long to read). Fractions of a second are allowed; below 0.01 s a quiet
    # stream would be little but keep-alives.
    sse_ping_s: float = Field(default=15.0, ge=0.01)
    # A stream whose client has not taken an event for this long is cut (and, unless it
    # runs in the background, its generation cancelled).
    sse_send_timeout_s: float = Field(default=30.0, gt=0)
    # WebSocket mode, per connection: lanes generating at once (OpenAI's API allows 16
    # responses at a time on one socket), creates waiting behind them, and the bytes of
    # history held in memory for `previous_response_id` chains. A message is bounded by
    # SPATE_MAX_BODY_BYTES like a POST body.
    ws_max_lanes: int = Field(default=16, ge=1)
    ws_max_queued: int = Field(default=64, ge=0)
    ws_held_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    # Routing that follows the cache (api/router.py): a request goes to the worker holding
    # its prompt's longest prefix unless that worker has `route_max_skew` more requests in
    # flight than the least busy one, one more for each `route_tokens_per_skew` tokens of
    # the held prefix (estimated at four characters a token); one not taken in
    # `route_deadline_s` goes to the shared queue. Off, every request goes to the shared
    # queue.
    routing: bool = True
    route_deadline_s: float = Field(default=2.0, gt=0)
    route_max_skew: int = Field(default=4, ge=1)
    route_tokens_per_skew: int = Field(default=256, ge=1)
    # The most urgent scheduler priority a client may ask for (lower runs first; the
    # default is 0). At 0 nobody can jump ahead of requests at the default; an operator
    # who trusts its clients lowers it, down to -PRIORITY_LIMIT.
    priority_floor: int = Field(default=0, ge=-PRIORITY_LIMIT, le=0)
    # Declared tools that run on the server's side (web_search, mcp, ...): "omit" leaves
    # them out of what the model is offered and echoes them; "reject" answers 400.
    server_tools: ServerToolPolicy = "omit"
    # The response store (redis://host:port/db); None (or empty) leaves it off.
    store_url: str | None = None
    # Redis connections this replica opens at most, shared by every request (a burst past
    # them waits for one to come free); resumed streams share one subscription besides.
    store_pool_size: int = Field(default=64, ge=2)
    # How long a call waits for a free Redis connection before a 503.
    store_pool_wait_s: float = Field(default=10.0, gt=0)
    # Seconds a stored response or conversation lives after its last write.
    store_ttl_s: int = Field(default=DEFAULT_TTL_S, ge=1)
    # Whether this replica runs a projector (SPATE_STORE_PROJECTOR). Off, the projection
    # is left to `spate store` processes, which then have a core of their own instead of
    # sharing the API's event loop with the streams it serves.
    store_projector: bool = True
    # Keys that seal reasoning items' encrypted_content (api/encrypted_content.py):
    # comma-separated url-safe base64 of 32 bytes, and a file of them one a line. The
    # first key seals, all of them open. None: nothing is sealed, nothing opens.
    encryption_keys: str = ""
    encryption_key_file: str | None = None

    @field_validator("store_url")
    @classmethod
    def _empty_store_url_is_off(cls, value: str | None) -> str | None:
        # compose passes `SPATE_STORE_URL: ${SPATE_STORE_URL:-}`: empty means unset.
        if value is None:
            return None
        return value.strip() or None

    @property
    def api_key_set(self) -> frozenset[str]:
        return frozenset(key.strip() for key in self.api_keys.split(",") if key.strip())
