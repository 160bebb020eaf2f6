"""The event contract as an AsyncAPI 3.0 document, generated from the event models.

`python -m events.asyncapi` (or `spate events asyncapi`) writes docs/asyncapi.yaml; a test
fails when the committed file differs from what the models say.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from events.fold import LOG_EVENT_TYPES
from events.generation import CancelRequested
from events.model_card import ModelCard, ModelLoadFailure
from events.request import RequestAccepted
from events.subjects import (
    CACHE_SUBJECT_PREFIX,
    CANCELS_SUBJECT_PREFIX,
    COUNTS_SUBJECT_PREFIX,
    EVENTS_STREAM,
    EVENTS_SUBJECT_PREFIX,
    LEASES_SUBJECT_PREFIX,
    LOAD_FAILURES_BUCKET,
    MODELS_BUCKET,
    RATE_LIMITS_BUCKET,
    REQUESTS_STREAM,
    REQUESTS_SUBJECT_PREFIX,
    WORKERS_BUCKET,
    worker_consumer,
)

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "docs" / "asyncapi.yaml"
SCHEMA_REF = "#/components/schemas/{model}"
TOKEN_RULE = (
    "One subject token: any character other than letters, digits, `_` and `-` becomes `_`."
)


def _doc(model: type[BaseModel]) -> str:
    return inspect.cleandoc(model.__doc__ or "")


def _type_of(model: type[BaseModel]) -> str:
    return str(model.model_fields["type"].default)


def _version_of(model: type[BaseModel]) -> int:
    return int(model.model_fields["v"].default)


def _msg_id_header(rule: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "Nats-Msg-Id": {
                "type": "string",
                "description": f"{rule}. JetStream drops a second publish with the same id "
                "inside its duplicate window, so a retried publish is never doubled.",
            },
            "traceparent": {
                "type": "string",
                "description": "W3C trace context of the HTTP request, when it had one "
                "(request.accepted only).",
            },
        },
        "required": ["Nats-Msg-Id"],
    }


def _message(model: type[BaseModel], rule: str) -> dict[str, Any]:
    event_type = _type_of(model)
    return {
        "name": event_type,
        "title": f"{event_type} (v{_version_of(model)})",
        "summary": _doc(model).split("\n\n")[0].replace("\n", " "),
        "contentType": "application/json",
        "headers": _msg_id_header(rule),
        "payload": {"$ref": SCHEMA_REF.format(model=model.__name__)},
    }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/messages/{name}"}


def asyncapi_document() -> dict[str, Any]:
    models: list[type[BaseModel]] = [*LOG_EVENT_TYPES, CancelRequested, ModelCard, ModelLoadFailure]
    _, schemas = models_json_schema(
        [(model, "validation") for model in models], ref_template=SCHEMA_REF
    )
    log_rule = "`<response id>:<seq>`"
    messages = {
        _type_of(model): _message(model, log_rule if model is not RequestAccepted else
                                  f"{log_rule} on {EVENTS_STREAM}; `<response id>` on {REQUESTS_STREAM}")
        for model in LOG_EVENT_TYPES
    }
    messages[_type_of(CancelRequested)] = _message(CancelRequested, "`<response id>:cancel`")
    log_messages = {name: _ref(name) for name in messages if name != "cancel.requested"}
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "spate event streams",
            "version": "1.0.0",
            "description": (
                "Every response spate serves is an event log in NATS JetStream. Each event "
                "is one JSON object with `type` (stable, past tense), `v` (the schema version "
                "of that type; older versions are upcast on read, events.codec.UPCASTERS), "
                "`response_id`, `seq` (0 for request.accepted, then +1 per event) and "
                "`created_at`. Read a log by `seq`, not by arrival. Generated from the models "
                "in events/ by `spate events asyncapi`; docs/events.md is the guide."
            ),
        },
        "defaultContentType": "application/json",
        "servers": {
            "nats": {"host": "127.0.0.1:4222", "protocol": "nats",
                     "description": "Any NATS server with JetStream; set SPATE_NATS_URL."},
        },
        "channels": {
            "requests": {
                "address": f"{REQUESTS_SUBJECT_PREFIX}.{{model}}",
                "description": (
                    f"Stream {REQUESTS_STREAM}: one request.accepted per response. The "
                    f"workers of a model share the durable pull consumer "
                    f"`{worker_consumer('MODEL').replace('MODEL', '<model>')}` (explicit ack)."
                ),
                "parameters": {"model": {"description": f"The model's name. {TOKEN_RULE}"}},
                "messages": {"request.accepted": _ref("request.accepted")},
                "x-spate-stream": REQUESTS_STREAM,
            },
            "routed_requests": {
                "address": f"{REQUESTS_SUBJECT_PREFIX}.{{model}}.to.{{worker_id}}",
                "description": (
                    f"Stream {REQUESTS_STREAM}: a request routed to the worker whose prefix "
                    "cache holds its prompt's prefix (`Nats-Msg-Id` `<response id>:to`), read "
                    "only by that worker's durable consumer `spate-workers-<model>-<worker id>`. "
                    "It starts only by writing the response's first lease; untaken at the "
                    "routing deadline, the API writes that lease and publishes the request on "
                    "the shared subject instead."
                ),
                "parameters": {"model": {"description": f"The model's name. {TOKEN_RULE}"},
                               "worker_id": {"description": f"The worker's id. {TOKEN_RULE}"}},
                "messages": {"request.accepted": _ref("request.accepted")},
                "x-spate-stream": REQUESTS_STREAM,
            },
            "cache": {
                "address": f"{CACHE_SUBJECT_PREFIX}.{{model}}.{{worker_id}}",
                "description": (
                    "Core NATS, no stream: a worker's cache report, after each response it "
                    "finishes and before its terminal event (the digests of that prompt's "
                    "prefixes) and on every heartbeat (its count of responses still "
                    "generating alone). The API's router indexes them."
                ),
                "parameters": {"model": {"description": f"The model's name. {TOKEN_RULE}"},
                               "worker_id": {"description": f"The worker's id. {TOKEN_RULE}"}},
                "messages": {"cache.report": {
                    "name": "cache.report",
                    "payload": {"type": "object",
                                "required": ["model", "worker_id", "in_flight", "digests"],
                                "properties": {"model": {"type": "string"},
                                               "worker_id": {"type": "string"},
                                               "in_flight": {"type": "integer"},
                                               "digests": {"type": "array",
                                                           "items": {"type": "string"}}}},
                }},
            },
            "events": {
                "address": f"{EVENTS_SUBJECT_PREFIX}.{{response_id}}",
                "description": (
                    f"Stream {EVENTS_STREAM}: the whole log of one response, `seq` 0, 1, 2, ... "
                    "It ends with generation.finished or generation.failed."
                ),
                "parameters": {"response_id": {"description": f"The response id. {TOKEN_RULE}"}},
                "messages": log_messages,
                "x-spate-stream": EVENTS_STREAM,
            },
            "cancels": {
                "address": f"{CANCELS_SUBJECT_PREFIX}.{{response_id}}",
                "description": f"Stream {EVENTS_STREAM}: a cancel the API wrote for the response.",
                "parameters": {"response_id": {"description": f"The response id. {TOKEN_RULE}"}},
                "messages": {"cancel.requested": _ref("cancel.requested")},
                "x-spate-stream": EVENTS_STREAM,
            },
            "leases": {
                "address": f"{LEASES_SUBJECT_PREFIX}.{{response_id}}",
                "description": (
                    f"Stream {EVENTS_STREAM}, not events: who may write the response's log now. "
                    "One message per delivery of the request (and one before the API writes a "
                    "worker_lost); every event a worker writes carries the headers "
                    "`Nats-Expected-Last-Subject-Sequence` (the latest lease's stream sequence) "
                    "and `Nats-Expected-Last-Subject-Sequence-Subject` (this subject), so "
                    "JetStream refuses the writes of a superseded worker. Readers of the log "
                    "skip this subject."
                ),
                "parameters": {"response_id": {"description": f"The response id. {TOKEN_RULE}"}},
                "messages": {"lease": {
                    "name": "lease",
                    "payload": {"type": "object", "required": ["holder"],
                                "properties": {"holder": {"type": "string"}}},
                }},
                "x-spate-stream": EVENTS_STREAM,
            },
            "counts": {
                "address": f"{COUNTS_SUBJECT_PREFIX}.{{model}}",
                "description": (
                    "Core NATS request-reply, no stream: the API sends the request.accepted a "
                    "create would publish; one worker of the model answers "
                    '`{"input_tokens": N}` or `{"error": {"code", "message", "param"}}`.'
                ),
                "parameters": {"model": {"description": f"The model's name. {TOKEN_RULE}"}},
                "messages": {"request.accepted": _ref("request.accepted")},
            },
        },
        "operations": {
            "publishRequest": {
                "action": "send", "channel": {"$ref": "#/channels/requests"},
                "summary": "The API publishes a request (after seq 0 of its log).",
            },
            "takeRequest": {
                "action": "receive", "channel": {"$ref": "#/channels/requests"},
                "summary": "A worker takes a request from its model's queue.",
            },
            "routeRequest": {
                "action": "send", "channel": {"$ref": "#/channels/routed_requests"},
                "summary": "The API routes a request to the worker holding its prefix.",
            },
            "reportCache": {
                "action": "send", "channel": {"$ref": "#/channels/cache"},
                "summary": "A worker reports the prefixes it cached and its load.",
            },
            "writeEvents": {
                "action": "send", "channel": {"$ref": "#/channels/events"},
                "summary": "The API writes seq 0 (and worker_lost); the worker writes the rest.",
            },
            "readEvents": {
                "action": "receive", "channel": {"$ref": "#/channels/events"},
                "summary": "The API, the store's projection and any queue consumer read a log.",
            },
            "cancelResponse": {
                "action": "send", "channel": {"$ref": "#/channels/cancels"},
                "summary": "The API cancels a response (client gone, or POST .../cancel).",
            },
            "takeLease": {
                "action": "send", "channel": {"$ref": "#/channels/leases"},
                "summary": "A worker takes a response's log for one delivery of its request.",
            },
            "countInputTokens": {
                "action": "send", "channel": {"$ref": "#/channels/counts"},
                "summary": "POST /v1/responses/input_tokens asks a worker to count a prompt.",
            },
        },
        "components": {
            "messages": messages,
            "schemas": schemas["$defs"],
        },
        "x-spate-buckets": {
            MODELS_BUCKET: {"key": "<model>", "value": {"$ref": SCHEMA_REF.format(model="ModelCard")}},
            WORKERS_BUCKET: {"key": "<model>.<worker id>",
                             "description": "Liveness: re-put by each worker, deleted when it stops; with a TTL."},
            LOAD_FAILURES_BUCKET: {
                "key": "<model>", "value": {"$ref": SCHEMA_REF.format(model="ModelLoadFailure")},
                "description": "A worker could not load the model; with a TTL, deleted when one loads it.",
            },
            RATE_LIMITS_BUCKET: {
                "key": "group.<key group> or key.<owner>",
                "description": "API replicas' shared rate-limit budgets (the theoretical arrival "
                "times of requests and tokens, JSON); changed by compare-and-set; with a TTL.",
            },
        },
    }


def render_asyncapi() -> str:
    import yaml  # only this command needs it

    header = "# Generated by `spate events asyncapi` from the models in events/. Do not edit.\n"
    body: str = yaml.safe_dump(asyncapi_document(), sort_keys=False, width=100, allow_unicode=True)
    return header + body


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PATH
    path.write_text(render_asyncapi())
