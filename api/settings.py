"""Settings of the API process, read from SPATE_* environment variables.

Each field's `description` is its row in docs/configuration.md, which
`python -m cli.configuration_doc` writes from these classes; `json_schema_extra` carries
what the page shows besides (cli/configuration_doc.py says how).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from events.request_settings import PRIORITY_LIMIT
from journal import JournalSettings
from store.base import DEFAULT_TTL_S

# What a declared tool that runs on OpenAI's side becomes (api/lowering/tool_policy.py).
ServerToolPolicy = Literal["omit", "reject"]


class RateLimitGroup(BaseModel):
    """Keys that share one budget (SPATE_RATE_LIMITS): `rpm` requests and `tpm` tokens a
    minute between them; 0 or absent: no limit of that kind."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: tuple[str, ...] = Field(min_length=1)
    rpm: int = Field(default=0, ge=0)
    tpm: int = Field(default=0, ge=0)


# A group's name is part of its budget's key in the rate-limit bucket.
_GROUP_NAME = r"^[A-Za-z0-9_-]{1,64}$"


class ApiSettings(JournalSettings):
    model_config = SettingsConfigDict(env_prefix="SPATE_", extra="ignore")

    host: str = Field(
        default="127.0.0.1",
        description="where the API listens (`--host`, `--port`); compose publishes it on "
        "127.0.0.1 at `SPATE_PORT`",
        json_schema_extra={"processes": "api, serve, compose"})
    port: int = Field(default=8000, ge=0, le=65535, json_schema_extra={"row": "host"})
    api_keys: str = Field(
        default="",
        description="comma-separated bearer keys; empty: no authentication (and every client "
        "is one tenant: docs/api.md, \"Tenancy\"); the API warns at start when it listens "
        "beyond loopback without keys")
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024,
        description="larger bodies get a 413, chunked or not: the body is read no further "
        "than this and the connection is closed; so does a smaller one whose request event "
        "is over the NATS server's `max_payload` (1 MiB by default)")
    max_file_bytes: int = Field(
        default=2 * 1024 * 1024, ge=1024,
        description="the largest file an `input_file` part may carry, decoded; larger: a 400 "
        "naming the part (docs/api.md)")
    # The HTTP server's own bounds (api/guards/http_limits.py).
    http_max_connections: int = Field(
        default=1024, ge=1,
        description="HTTP connections a replica holds at once; past it uvicorn answers 503 "
        "before the app sees the request")
    http_head_timeout_s: float = Field(
        default=10.0, gt=0,
        description="a connection that has not sent a whole request head this long after "
        "opening (or after its last response) is closed")
    http_keep_alive_s: int = Field(
        default=5, ge=1,
        description="an idle keep-alive connection is closed after this long")
    http_max_head_bytes: int = Field(
        default=16 * 1024, ge=1024,
        description="a request head (request line and headers) larger than this, however it "
        "arrives, is a 431 (`request_head_too_large`, the message naming this setting) and "
        "the connection is closed")
    max_inflight: int = Field(
        default=256, ge=1,
        description="open responses per API replica; past it a 429 with `Retry-After`")
    # Per API key (one shared owner when keys are off).
    key_max_open: int = Field(
        default=64, ge=1,
        description="responses one API key holds open on one replica (streaming, "
        "non-streaming, and background ones being streamed); past it a 429 with "
        "`Retry-After` naming the bound. With keys off every client is one shared key "
        "(docs/reliability.md, \"One key cannot starve another\")")
    key_max_background: int = Field(
        default=64, ge=1,
        description="background responses of one key that have not ended, counted in the "
        "store so every replica shares the bound; past it a 429")
    key_max_resumes: int = Field(
        default=64, ge=1,
        description="resumed streams (`GET /v1/responses/{id}?stream=true`) one key holds on "
        "one replica; past it a 429")
    # Rate limits a client reads in x-ratelimit-* headers (api/guards/rate_limits.py).
    key_rpm: int = Field(
        default=0, ge=0,
        description="requests a minute one API key may create (`POST /v1/responses` and "
        "WebSocket creates), counted across every API replica through NATS; past it a 429 "
        "with `Retry-After`; every create answer carries `x-ratelimit-*` headers "
        "(docs/api.md, \"Rate limits\"). 0: no limit. With keys off, every client shares it")
    key_tpm: int = Field(
        default=0, ge=0,
        description="tokens a minute one API key may spend, as `SPATE_KEY_RPM` (estimated at "
        "admission, trued up to the response's usage: docs/api.md, \"Rate limits\"). 0: no "
        "limit")
    rate_limits: Annotated[dict[str, RateLimitGroup], NoDecode] = Field(
        default_factory=dict,
        description="key groups, as JSON or the path of a JSON file: `{\"team-a\": "
        "{\"keys\": [\"sk-1\", \"sk-2\"], \"rpm\": 600, \"tpm\": 200000}}`; a group's keys "
        "share its budget (0 or absent: no limit of that kind) and keys in no group get "
        "`SPATE_KEY_RPM` and `SPATE_KEY_TPM` each. Every key must be one of "
        "`SPATE_API_KEYS`, in one group at most",
        json_schema_extra={"shown_default": "unset (no groups)"})
    background_slot_ttl_s: int = Field(
        default=3600, ge=60,
        description="a background slot whose response's end never reached the store is "
        "freed after this long")
    # Fractions of a second are allowed; below 0.01 s a quiet stream would be little but
    # keep-alives.
    sse_ping_s: float = Field(
        default=15.0, ge=0.01,
        description="a stream quiet for this long (the model queued, or a prompt long to "
        "read) gets a keep-alive comment line, framed so every SSE client skips it "
        "(docs/api.md, \"Streaming\"); at least `0.01`")
    sse_send_timeout_s: float = Field(
        default=30.0, gt=0,
        description="a stream whose client takes no event for this long is cut (and its "
        "generation cancelled, unless it runs in the background)")
    # WebSocket mode, per connection. OpenAI's API allows 16 responses at a time on one
    # socket; a message is bounded by SPATE_MAX_BODY_BYTES like a POST body.
    ws_max_lanes: int = Field(
        default=16, ge=1,
        description="WebSocket mode: lanes (`stream_id`) generating at once on one "
        "connection; past it a 429 error event")
    ws_max_queued: int = Field(
        default=64, ge=0,
        description="WebSocket mode: creates waiting behind a busy lane on one connection; "
        "past it a 429 error event")
    ws_held_bytes: int = Field(
        default=16 * 1024 * 1024, ge=0,
        description="WebSocket mode: bytes of history one connection holds for "
        "`previous_response_id` chains (least recently used dropped first)")
    # Routing that follows the cache (api/cache_router.py).
    routing: bool = Field(
        default=True,
        description="route a request to the worker whose prefix cache holds its prompt's "
        "prefix (chains, `prompt_cache_key`, shared prefixes; docs/internals.md); `false` "
        "sends every request to the shared queue")
    route_deadline_s: float = Field(
        default=2.0, gt=0,
        description="a routed request its worker has not taken by then goes to the shared "
        "queue (it runs once either way)")
    route_max_skew: int = Field(
        default=4, ge=1,
        description="a holder with this many more requests in flight than the least busy "
        "other worker is passed over")
    route_tokens_per_skew: int = Field(
        default=256, ge=1,
        description="each this many tokens of the held prefix (estimated at four characters "
        "a token) allow the holder one more request of skew: a long history is worth more "
        "waiting than a short shared prefix")
    # An operator who trusts its clients lowers it, down to -PRIORITY_LIMIT.
    priority_floor: int = Field(
        default=0, ge=-PRIORITY_LIMIT, le=0,
        description="the most urgent `priority` a client may ask for (lower runs first, "
        f"default 0): at 0 nobody jumps ahead of requests at the default; down to "
        f"`-{PRIORITY_LIMIT}` to let clients")
    server_tools: ServerToolPolicy = Field(
        default="omit",
        description="declared tools that run on the server's side at OpenAI (`web_search`, "
        "`file_search`, `code_interpreter`, `image_generation`, `mcp`, `computer`, "
        "`tool_search`): `omit` echoes them and never offers them to the model (Codex always "
        "declares `web_search`); `reject` answers a 400 naming the tool")
    store_url: str | None = Field(
        default=None,
        description="the response store, `redis://host:port/db`, or a Redis Cluster through "
        "any node, `redis+cluster://host:port` (compose's `store-cluster` profile; "
        "docs/store.md); `spate serve --store` (`make serve STORE=1`) starts an embedded "
        "redis-server unless this is set; `spate api --store-url`",
        json_schema_extra={"shown_default": "unset (store off)"})
    store_pool_size: int = Field(
        default=64, ge=2,
        description="Redis connections one API replica opens at most, shared by every "
        "request; a call past them waits for one (up to `SPATE_STORE_POOL_WAIT_S`, 10 s, "
        "then a 503). Resumed streams share one subscription besides, whatever their number")
    store_pool_wait_s: float = Field(default=10.0, gt=0,
                                     json_schema_extra={"described_in": "store_pool_size"})
    store_ttl_s: int = Field(
        default=DEFAULT_TTL_S, ge=1,
        description="a stored response or conversation expires this long after its last "
        "write",
        json_schema_extra={"shown_default": f"`{DEFAULT_TTL_S}` ({DEFAULT_TTL_S // 86400} days)"})
    # Off, the projectors of `spate store` processes have a core of their own instead of
    # sharing the API's event loop with the streams it serves.
    store_projector: bool = Field(
        default=True,
        description="whether this API replica projects the event log into the store; "
        "`false` leaves it to `spate store` processes, which then have a core of their own "
        "(lower projection lag under load: docs/performance.md)")
    # api/lowering/encrypted_content.py
    encryption_keys: str = Field(
        default="",
        description="keys that seal reasoning items' `encrypted_content` (comma-separated, "
        "url-safe base64 of 32 bytes; the first seals, all open). Empty with no key file: "
        "nothing is sealed; `spate serve` makes `.spate/encryption.key`")
    encryption_key_file: str | None = Field(
        default=None,
        description="a file of such keys, one a line, after those of "
        "`SPATE_ENCRYPTION_KEYS`")

    @field_validator("store_url")
    @classmethod
    def _empty_store_url_is_off(cls, value: str | None) -> str | None:
        # compose passes `SPATE_STORE_URL: ${SPATE_STORE_URL:-}`: empty means unset.
        if value is None:
            return None
        return value.strip() or None

    @field_validator("rate_limits", mode="before")
    @classmethod
    def _rate_limits_from_json(cls, value: Any) -> Any:
        """JSON text, or the path of a file of it; empty: no groups."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if not text:
            return {}
        if not text.startswith("{"):
            try:
                text = Path(text).read_text()
            except OSError as error:
                raise ValueError(f"not JSON, and no file to read there ({error.strerror})") from None
        try:
            groups = json.loads(text)
        except ValueError as error:
            raise ValueError(f"not valid JSON: {error}") from None
        if not isinstance(groups, dict):
            raise ValueError("expected a JSON object of key groups by name")
        return groups

    @field_validator("rate_limits")
    @classmethod
    def _groups_name_known_keys(
        cls, groups: dict[str, RateLimitGroup], info: ValidationInfo
    ) -> dict[str, RateLimitGroup]:
        keys = _key_set(info.data.get("api_keys", ""))
        grouped: dict[str, str] = {}
        for name, group in groups.items():
            if not re.match(_GROUP_NAME, name):
                raise ValueError(f"the group name {name!r} is not 1 to 64 letters, digits, "
                                 "'_' or '-'")
            for index, key in enumerate(group.keys):
                # The key itself is never said: a settings error may end up in a log.
                if key not in keys:
                    raise ValueError(f"group {name!r}: keys[{index}] is not one of "
                                     "SPATE_API_KEYS")
                if key in grouped:
                    raise ValueError(f"group {name!r}: keys[{index}] is in group "
                                     f"{grouped[key]!r} too")
                grouped[key] = name
        return groups

    @property
    def api_key_set(self) -> frozenset[str]:
        return _key_set(self.api_keys)


def _key_set(api_keys: str) -> frozenset[str]:
    return frozenset(key.strip() for key in api_keys.split(",") if key.strip())
