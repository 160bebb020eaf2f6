"""Write docs/api.md from the request model's field table (api/schema/fields.py).

    .venv/bin/python scripts/render_api_doc.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from api.guards.limits import limits_table  # noqa: E402
from api.schema.fields import FIELDS  # noqa: E402

HEADER = """# spate's Responses API: every request field and what spate does with it

`POST /v1/responses` takes the body of OpenAI's Responses API. Nothing is dropped
silently: each field below is honored, echoed on the Response, an accepted no-op, or
refused with a 400 whose `error.param` names it. A key not listed here is a 400
`Unknown parameter: 'x'.`. A field the table refuses is still accepted at its default
value, which asks for nothing: `null`, and `false` for `background` (clients that fill in
every field send `background: false`, `previous_response_id: null`, `prompt: null`). This
page is written from `api/schema/fields.py` (the request model's own table) by
`scripts/render_api_doc.py`; `tests/api/test_fields_doc.py` fails when the two disagree.

| field | treatment | notes |
|---|---|---|
"""

FOOTER = """
Sampling values a request leaves out are resolved: to the model's recommendation when it
has one (its worker advertises it: SmolLM2-135M-Instruct recommends temperature 0.2 and
top_p 0.9; a Hugging Face folder's `generation_config.json` gives its own), otherwise to
OpenAI's defaults (temperature 1, top_p 1). The Response echoes the resolved values.

A request with a `thinking_token_budget` gets its reasoning *and then an answer*: its
response may not end (EOS, `stop_token_ids`) inside a think block, which the model's end
marker or the budget's closes within the budget, nor after it while the answer holds only
whitespace; the engine masks the ending tokens there, as vLLM's `min_tokens` does
(`workers/engine/thinking_budget.py`). A free-text answer therefore has at least one
visible token unless `max_output_tokens` cuts it first. Without a budget nothing is
masked, and a model may end inside its block (the reasoning item then holds everything).

A response cut by a length limit is `incomplete` with `incomplete_details.reason:
"max_output_tokens"`, the one length reason OpenAI's SDK accepts when it validates
strictly, whichever limit it was. Where the limit was the model's context (no
`max_output_tokens` was set, or a larger one than the context left room for),
`incomplete_details` also carries a `message` saying so, with the token counts (`The
response reached the end of the model's context: 8192 tokens (34 input, 8158 output); no
max_output_tokens was set. ...`), and the worker logs the same line. A worker's context
is the model's unless `SPATE_MAX_MODEL_LEN` lowers it.

## Errors

Every error is `{"error": {"message", "type", "param", "code"}}` with the matching
status: 400 `invalid_request_error` (validation; `param` names the field, nested ones as
`input[0].content`), 401 (a key is configured and the request has none or a wrong one),
404 (unknown model; unknown response id: `Response with id 'resp_x' not found.` with
`type: "invalid_request_error"`, `param: "response_id"`, `code: "not_found"`; an unknown
route: `Invalid URL (GET /v1/x)`, and 405 for a known route with another method), 413
(`request_too_large`: a body over `SPATE_MAX_BODY_BYTES`, or a request whose event is
over the NATS server's `max_payload`), 431 (`request_head_too_large`: a request line
and headers over `SPATE_HTTP_MAX_HEAD_BYTES`; the connection is closed), 409
(`request_id_in_use`: a `request_id` some response already has), 429
`rate_limit_exceeded` with `Retry-After`
(too many open responses on the replica, or one key past `SPATE_KEY_MAX_OPEN`,
`SPATE_KEY_MAX_BACKGROUND` or `SPATE_KEY_MAX_RESUMES`, the message naming the bound:
docs/reliability.md), 503 (NATS unreachable, or no live worker for the model:
`model_unavailable`, or `model_load_failed` when a worker could not load it, the message
saying why, or `server_shutting_down` with `Retry-After` while the replica drains: docs/reliability.md),
500 `server_error` only for bugs. A 5xx body names what failed (`bus_unavailable`: "The
message bus (NATS) is unavailable", `store_unavailable`: "The response store is unavailable")
and never an address or a driver's message: those go to the API's log. A non-streaming request whose input the worker finds
too long (or otherwise unusable) gets a 400 naming `input`; a streaming one gets an
`error` event with that `param`, then `response.failed`.

## Files, images and reasoning that round-trips

A message's content may hold `input_file` parts. The file comes inline: `file_data` as
base64 or a data URL (`data:application/pdf;base64,...`), or a data URL in `file_url`;
spate has no file store and fetches no URL, so a `file_id` or an `https` `file_url` is a
400 naming the part. PDFs are read with pypdf (a PDF whose cross-reference table is
missing or wrong, e.g. with no `startxref`, is rebuilt by scanning its objects, as PDF
readers recover such files; one with no objects or no document catalog stays a 400),
plain text and markdown (UTF-8, `text/*`,
`.txt`, `.md`, `.csv`, `.json`) are taken as they are, and the text replaces the part as
`<file name="...">` ... `</file>`, which is also what the store keeps. A file over
`SPATE_MAX_FILE_BYTES` (decoded; 2 MiB by default), a PDF past 500 pages, an encrypted PDF
or one with no text layer, and any other type are a 400 naming the part
(`input[1].content[0]`, code `invalid_file`). An `input_image` part is a 400 naming the
part on a model whose worker advertises no image input (`input_modalities` on its model
card; every model spate serves today reads text only). A conversation's items
(`POST /v1/conversations`, `.../items`) take neither files, images nor sealed reasoning: a
400 naming the part says to send them in a response's input, where they are read.

With `include: ["reasoning.encrypted_content"]`, each finished reasoning item (in
`response.output_item.done`, the terminal event's Response and the JSON reply) carries
`encrypted_content`: its text sealed with AES-GCM under the server's key and bound to the
caller's API key and the model. Sent back in a later request's `input` (with or without
`content`), it is opened and reaches the prompt as the text the model wrote, so a client
that keeps no server state (`store: false`) still returns its reasoning (a stored response
read back with `GET` holds its reasoning in `content` only). Content that
was altered, sealed by another server or key, for another API key or another model is a 400
naming `input[i].encrypted_content` (code `invalid_encrypted_content`). Keys:
`SPATE_ENCRYPTION_KEYS` (comma-separated, url-safe base64 of 32 bytes; make one with
`python -c "from api.lowering.encrypted_content import new_key; print(new_key())"`) and
`SPATE_ENCRYPTION_KEY_FILE` (one a line). The first key seals and every key opens: to
rotate, put the new key first and drop the old one later. `spate serve` with neither set
makes `.spate/encryption.key` once and keeps it. An API with no key still accepts the
`include` (Codex always sends it), seals nothing and logs a warning once; sealed content
sent to it is a 400.

## Streaming

`stream: true` answers with SSE events (`event:`, `data:`, `id:` = `sequence_number`),
and after the terminal event (`response.completed`, `response.incomplete` or
`response.failed`) the stream ends with a literal `data: [DONE]`, as the Open Responses
specification says; the official SDK stops reading at it. A resumed stream
(`GET /v1/responses/{id}?stream=true`) ends the same way. A stream cut by a shutdown ends
with an `error` event naming where to resume, and no `[DONE]`.

A stream that has sent nothing for `SPATE_SSE_PING_S` seconds (15 by default: the model
queued, or a long prompt being read) gets a keep-alive, the comment line `: keep-alive`
on its own, with no blank line after it. It becomes the first line of the next event's
block, which every SSE parser skips. The usual framing, a comment and then a blank line,
would break the official SDK: once it has seen an `id:` line its decoder dispatches an
event at every blank line (the SSE specification keeps the last id across events, but
dispatches nothing without data), so it reads that blank line as an event with empty
data and fails to parse it. A client that goes before the end leaves one line in the
API's log (`the client of resp_... went before the end of its stream`); the generation
is cancelled unless it runs in the background.

Every Response and streamed event validates against the Open Responses specification's
schema (version 2026-04-24, vendored in `tests/conformance/` with the compliance cases).
An `error` event carries `code`, `message` and `param` both at its top (the official SDK
reads them there) and in an `error` object with a `type` (the specification reads them
there). Reasoning text streams as `response.reasoning_text.delta` / `.done`, the names
the official SDK knows (it refuses an event type it does not know); this version of the
specification calls them `response.reasoning.delta` / `.done`, with the same fields.

## WebSocket mode

`/v1/responses` also takes a WebSocket upgrade (OpenAI's WebSocket mode; the Agents SDK's
`responses_websocket_session()` and `OpenAIResponsesWSModel` speak it). The upgrade is
authenticated like a POST: the same `Authorization: Bearer` keys, the same owner; a
missing or wrong key is a 401 with the error body. On the socket:

- The client sends `response.create` events: `{"type": "response.create", ...}` holding
  the POST body (every field above, treated the same), plus `stream_id` and `generate`.
  `stream` is implicit (`true` is accepted, `false` is a 400); `background: true` is a
  400 (use POST). Each generated response is one request event and one event log in
  NATS, exactly as over HTTP: the socket is a transport.
- The server sends the streaming events of each response (the SSE events above, the same
  `sequence_number`s, no `[DONE]`), each with the create's `stream_id` when it had one.
- Errors are `error` events in OpenAI's WebSocket shape: `{"type": "error", "status",
  "error": {"type", "code", "message", "param"}, "stream_id"}`, `status` being what the
  same failure answers over HTTP. A bad create (invalid JSON, an unknown field, an unknown
  model, a bound passed) is answered with one and the socket stays open; an error while a
  response streams also carries its `sequence_number` and is followed by
  `response.failed`.
- `stream_id` names a lane (1 to 256 of `A-Za-z0-9_.-`; absent is the default lane).
  Lanes run side by side; creates on one lane run one after the other, in order.
  `stream_id` routes; `previous_response_id` chains, so a lane may fork from a response of
  another lane.
- `previous_response_id` resolves first from the responses the connection holds in
  memory (each finished response's whole history: the turns before it, its input, its
  output), so a chain goes on with `store: false` or with the store off; then from the
  store when it is on; otherwise the answer is a 400 `previous_response_not_found`, and
  the client starts the chain again with its full history. A turn sends only its new
  items. A continuation whose `function_call_output` answers no call of the held chain
  (nor one earlier in its own input) is a 400 `error` event (`code: invalid_value`,
  `param: input[i].call_id`). Any continuation that fails drops the response it named
  from the connection, as OpenAI's WebSocket mode does, so the next create naming it
  reads from the store or gets `previous_response_not_found`.
- `generate: false` checks and lowers the create as for a generated turn and holds its
  history under a new response id (`response.created`, `response.in_progress`,
  `response.completed` with no output and zero usage), for a later turn to chain from.
  Before it answers, a worker prefills the prompt (a request of its own, under another
  id, with one output token nobody reads and `store: false`), so the turn that builds on
  it finds that prompt in the prefix cache, and the router sends it to that worker. The
  response itself is the connection's alone and is not stored; a warm-up refused by the
  replica's or the key's in-flight bound is skipped, and the answer is the same.
- Bounds per connection: lanes generating at once (`SPATE_WS_MAX_LANES`, 16), creates
  waiting behind them (`SPATE_WS_MAX_QUEUED`, 64), both a 429 `rate_limit_exceeded`
  error event; a message, like a POST body (`SPATE_MAX_BODY_BYTES`, a 413 error event);
  the history held for chains (`SPATE_WS_HELD_BYTES`, 16 MiB: the least recently used
  responses are dropped first, and a history alone past it is not held). Each response
  also takes one of the replica's `SPATE_MAX_INFLIGHT` slots while it generates.
- A socket that closes, or takes no event for `SPATE_SSE_SEND_TIMEOUT_S`, cancels what it
  was generating, except responses that are stored (`store` not false with the store on),
  which go on and can be read back. A shutdown cuts its open responses as it cuts SSE
  streams, with a resumable `error` event (`server_shutting_down`).

## Function calling and structured output

`tools` takes `function` tools and `namespace` tools (their functions are called as
`<namespace>.<name>`; the `function_call` item then carries `name` and `namespace`). A call
streams as `response.output_item.added` (a `function_call` item, `status: "in_progress"`,
empty `arguments`), `response.function_call_arguments.delta` events whose deltas join to the
final `arguments`, `response.function_call_arguments.done` and
`response.output_item.done`. Send the call back as a `function_call` input item with a
`function_call_output` item carrying its `call_id`, and the model answers from the result.
`tool_choice` `required`, a named function and `allowed_tools` in `required` mode force a
call, and every call's arguments follow the tool's `parameters` schema: the worker enforces
both by constrained decoding, as it does `text.format` (`json_object`, `json_schema`) and
`structured_outputs`, on the answer only, after any reasoning. A grammar that does not compile
(an unsupported schema keyword, a malformed regex) is a 400 naming the field. An answer cut
by `max_output_tokens` is incomplete, and so is its JSON.

`custom` tools take text, not JSON. Their input is free text, or held by constrained
decoding to the tool's `format`: a `grammar` in `regex` syntax, or in `lark` syntax (read
by Lark and compiled into the same grammar engine as JSON schemas; terminal flags such as
`"x"i` have no equivalent and are a 400 naming `tools[i].format`). A call streams as
`response.output_item.added` (a `custom_tool_call` item with empty `input`),
`response.custom_tool_call_input.delta` events, `response.custom_tool_call_input.done` and
`response.output_item.done`; send it back as a `custom_tool_call` item with a
`custom_tool_call_output`. The model writes these calls as
`<custom_tool_call name="...">` blocks, described to it in the system prompt.
`local_shell`, `shell` and `apply_patch` are offered as tools with the fixed schemas of
`events/builtin_tools.py`; a call comes back as a `local_shell_call` (`action.command`),
`shell_call` (`action.commands`) or `apply_patch_call` (`operation`) item, added and done
once its action is whole, and is answered with the matching `*_output` item.

The tool-call format's markup (`<tool_call>` blocks) never reaches the answer as text. A call
cut by `max_output_tokens` is a `function_call` item with `status: "incomplete"` and the
arguments written so far, once its name is complete; cut before that, it leaves no item at
all. A constrained answer (`tool_choice` `required` or named, a JSON `text.format`,
`structured_outputs`) also holds when the model thinks first: the model cannot end the
response inside its think block, so the block closes through its end marker (the model's
own, or the one `thinking_token_budget` forces) and the constrained answer follows. With no
budget, a model that never closes its block runs into `max_output_tokens`, so set a
`thinking_token_budget` with a constrained answer.

## Limits

Counts and sizes a request may hand the worker, beyond each field's own bounds in the
table above: each costs every request of the batch or the worker's grammar compiler.
Past one, a 400 naming the field, before anything is published. This table is rendered
from `api/guards/limits.py`, where the checks read the same entries. The body itself is bounded
by `SPATE_MAX_BODY_BYTES` and nests at most 64 levels.

LIMITS_TABLE
## Tenancy

Each request acts for an owner: a digest of its API key (`SPATE_API_KEYS`), or one
shared owner when keys are off, so that without keys every client is the same tenant.
The owner is on every request event (`owner`, docs/events.md) and scopes what a client
can name or reach:

- stored responses, their input items and conversations: another owner's id reads as a
  404, exactly as an id that does not exist;
- item ids: each owner has its own, so two keys can store items with one id and each
  key's `item_reference` finds its own item. Within one request's `input`, and across a
  conversation or a `previous_response_id` chain and the input added to it, an id may
  appear once: a repeat is a 400 naming the field (`input[1].id`, `items[0].id`), found
  before anything is published;
- prefix-cache reuse: the worker keys cached KV blocks by the owner, then by the
  request's `cache_salt`, so a key never gets `cached_tokens` from another key's prompt
  (and so cannot test whether another tenant sent a text); requests of one owner with
  different salts share nothing either;
- conversation ids are the server's choice (`conv_` and 48 random hex digits), so no
  client can pick one another key uses;
- not response ids: a `request_id` becomes the response id, the name of its event log,
  which is one namespace for all keys. An id any response has is a 409, whoever's it is
  (the answer says nothing more), and of two requests racing for one id exactly one
  gets it: the log is claimed atomically when the request is published.

## Rate limits

An operator who shares one spate between teams gives each API key a budget a minute:
`SPATE_KEY_RPM` (creates) and `SPATE_KEY_TPM` (tokens) for every key, or a key group
(`SPATE_RATE_LIMITS`, docs/configuration.md) whose keys share one budget. Without keys
every client is one owner and shares one budget. Only creates spend it (`POST
/v1/responses` and WebSocket `response.create`, a `generate: false` warm-up included);
reads, cancels and deletes do not. A budget of L a minute holds at most L and earns one
unit back every 60/L seconds (the generic cell rate algorithm), so a full budget may be
spent at once and refills evenly. The budgets live in a JetStream key-value bucket
(`spate_rate_limits`) changed by compare-and-set, so every API replica spends the same
ones, whichever replica a request reaches.

- Tokens are charged at admission as an estimate: the input's characters (messages,
  reasoning, tool calls, the tools' names, descriptions and schemas) over four, plus
  `max_output_tokens` when the request sets it. When the response ends, the replica that
  served it charges or gives back the difference to its usage (input plus output
  tokens); a create refused after the charge (another bound, a publish that failed) is
  given back whole.
- Every create answer under a budget (JSON, SSE, and the 429 itself) carries the
  headers OpenAI sends, for each limited kind (`requests`, `tokens`):
  `x-ratelimit-limit-*`, `x-ratelimit-remaining-*` and `x-ratelimit-reset-*` (how long
  until the budget is whole again, written `20ms`, `1.5s`, `6m0s`). A server without
  limits sends none. A WebSocket has no headers for each create: a create past its
  budget is an `error` event with the 429's body.
- Past a budget, a 429 `rate_limit_exceeded` before anything is published, whose message
  names the budget (`requests per min (RPM)` or `tokens per min (TPM)`, for this API key
  or a key group), with `Retry-After` (seconds) and `retry-after-ms`: the official SDK
  waits that long and retries by itself. A request whose estimate is more than the whole
  budget can never run: a 429 `Request too large` without `Retry-After`.
- If the bucket cannot be reached, requests go through uncounted (one warning in the
  API's log, and another when counting resumes): a limiter does not take the service
  down with it.

## Compaction

Long agent sessions outgrow the model's context (8k tokens for the default model). Two
ways keep them going, one mechanism (`api/lowering/compaction.py`):

- `POST /v1/responses/compact` takes `model`, `input` and/or `previous_response_id`,
  `instructions`, `prompt_cache_key`, `safety_identifier` (the official SDK's
  `client.responses.compact`) and answers `{"object": "response.compaction", "output":
  [<compaction item>], "usage": ...}`. A conversation of one turn (nothing older than
  the turns kept verbatim) gets a compaction item all the same: it holds that turn and no
  summary, no model request is made (usage 0), and sent back it opens into that turn
  alone. An empty `input` with no `previous_response_id` is a 400.
- `context_management: [{"type": "compaction", "compact_threshold": N}]` on a create: a
  worker counts the input's tokens with the chat template; past `N` (at least 1,000;
  without it, 80% of the model's context) the input is compacted before the request is
  published, the model answers from the compacted input, and the response's output
  opens with the compaction item (`response.output_item.added`/`.done` right after
  `response.in_progress`, streamed or not).

What a compaction item holds: a summary of the older turns, written by the served model
itself (the turns rendered as a transcript and read in parts of about 2,000 tokens, each
folded into a running summary of up to 256 tokens; each part is an ordinary request of the
caller's, one request event each), and the turns kept verbatim: the last user message and
the latest steps after it (up to about 6,000 characters, never a tool output without its
call). System and developer messages are instructions, not turns: they are neither
summarized nor carried, and stay where the client sends them. `encrypted_content` is
that content sealed like reasoning (AES-GCM under the server's key, bound to the owner
and the model; see above), so it round-trips with `store: false`; on a server without a
key it is base64 marked `spate0.`, unsealed. A tampered or foreign item is a 400 naming
it.

Sent back in `input` (or found in a `previous_response_id` chain or a conversation), the
turns before the last compaction item are dropped, since it stands for them (instructions
stay), and the item opens into a developer message `Summary of the earlier conversation
(compacted): ...` followed by the kept turns.

What a small model's summary keeps, and what it cannot: names, numbers, file names,
decisions and the task still open survive well; exact wording, long code and tool
outputs do not (an item's text in the transcript is cut at 3,000 characters), and a
135M-parameter model's summaries are short and sometimes lossy. The latest turn is
always kept word for word, so the question being answered is never paraphrased.

## Other routes

- `GET /`: the playground, a page that streams a response with its reasoning and answer
  side by side (files in `api/static/`; see the README's "Try it in a browser").
- `POST /v1/responses/compact`: see Compaction above.
- `GET /v1/models`: the models some live worker serves (`data`), and beside them
  `load_failures`: models a worker could not load in the last 15 minutes, each
  `{"id", "failed_at", "error": {"code": "model_load_failed", "message"}}` (the message
  names what is wrong: an unsupported architecture, tokenizer, quantization or template
  with the supported list, a missing file, memory).
- `GET /health`: the process is up. `GET /ready`: NATS connected and at least one live
  worker (else 503, its `reason` naming any model that could not load); the body lists
  `models`, each model's kernel backend in `kernels` (`{"name": "cpu", "ops": "fused CPU
  ops", "fallback": null}`; a fallback to the slower torch ops says why in `fallback`),
  and `load_failures` (model name to reason).
- `GET /v1/responses/{id}` (also with `?stream=true&starting_after=N`),
  `DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
  `GET /v1/responses/{id}/input_items`: they need the response store; until it is enabled
  they answer 404 for every id, and the message says the store is off and names
  `SPATE_STORE_URL`.
"""


def render() -> str:
    rows = "".join(f"| `{name}` | {treatment.value} | {note} |\n" for name, (treatment, note) in FIELDS.items())
    return HEADER + rows + FOOTER.replace("LIMITS_TABLE\n", limits_table() + "\n")


if __name__ == "__main__":
    (ROOT / "docs" / "api.md").write_text(render())
