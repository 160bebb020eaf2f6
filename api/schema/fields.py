"""How spate treats every top-level Responses request field: the one source of truth.

The request model rejects what is listed as rejected before validating the rest, and
docs/api.md is checked against this table by the tests.
"""

from __future__ import annotations

from enum import Enum

from events.request_settings import (
    LOGIT_BIAS_LIMIT,
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_CACHE_KEY_CHARS,
    MAX_REPETITION_PENALTY,
    MAX_SAFETY_IDENTIFIER_CHARS,
    MAX_TEMPERATURE,
    MAX_THINKING_TOKEN_BUDGET,
    MAX_TOKEN_ID,
    MAX_TOKEN_ID_ENTRIES,
    MAX_TOOL_CALLS,
    MAX_TOP_K,
    MAX_TOP_LOGPROBS,
    PENALTY_LIMIT,
    PRIORITY_LIMIT,
)


class Treatment(str, Enum):
    HONORED = "honored"
    ECHOED = "echoed"
    NO_OP = "accepted no-op"
    REJECTED = "rejected (400)"
    NEEDS_STORE = "needs the store (400 until enabled)"


STORE_ENV = "SPATE_STORE_URL"

FIELDS: dict[str, tuple[Treatment, str]] = {
    "model": (Treatment.HONORED, "must name a served model: unknown 404, no live worker 503"),
    "input": (Treatment.HONORED, f"a string, or items: message (content a string or parts: input_text/output_text; input_file, inline, read into text; input_image, 400 on a text-only model), function_call, function_call_output, custom_tool_call, custom_tool_call_output, local_shell_call, local_shell_call_output, shell_call, shell_call_output, apply_patch_call, apply_patch_call_output, reasoning (plain text, or encrypted_content this server sealed), item_reference (an earlier response's item by id; needs the store, {STORE_ENV})"),
    "instructions": (Treatment.HONORED, "first system message; echoed"),
    "stream": (Treatment.HONORED, "true selects SSE"),
    "max_output_tokens": (Treatment.HONORED, f"cap on generated tokens, 1..{MAX_OUTPUT_TOKENS}; hit: status incomplete"),
    "temperature": (Treatment.HONORED, f"[0, {MAX_TEMPERATURE:g}], finite; 0 is greedy; echoed"),
    "top_p": (Treatment.HONORED, "(0, 1]; echoed"),
    "top_k": (Treatment.HONORED, f"-1..{MAX_TOP_K}; -1 or 0 turn it off; above the vocabulary size keeps every token"),
    "min_p": (Treatment.HONORED, "[0, 1]"),
    "seed": (Treatment.HONORED, "int64 ([-2^63, 2^63-1]); the same seed gives the same tokens"),
    "stop": (Treatment.HONORED, "a string or a list of non-empty strings; removed from the text"),
    "thinking_token_budget": (Treatment.HONORED, f"-1 or absent: unlimited; 0..{MAX_THINKING_TOKEN_BUDGET}: at most N thinking tokens"),
    "reasoning": (Treatment.HONORED, "effort 'none' turns thinking off, other values on; summary and generate_summary are accepted, and no summary is written (reasoning items carry summary [] and the whole reasoning in content); context is a no-op (every reasoning item sent back is rendered); mode is a no-op (a served model has one mode); echoed"),
    "chat_template_kwargs": (Treatment.HONORED, "merged over the model's defaults"),
    "metadata": (Treatment.ECHOED, "at most 16 string pairs"),
    "user": (Treatment.ECHOED, ""),
    "text": (Treatment.HONORED, "format text, json_object or json_schema: the answer (after any reasoning) is constrained to it; verbosity is a no-op; echoed"),
    "store": (Treatment.HONORED, f"with the store on ({STORE_ENV}) true by default and kept for GET; with it off the request runs unstored"),
    "background": (Treatment.NEEDS_STORE, f"true answers at once with status queued; needs the store ({STORE_ENV}) and store not false"),
    "previous_response_id": (Treatment.NEEDS_STORE, f"the chain's input and output items come first; needs the store ({STORE_ENV})"),
    "conversation": (Treatment.NEEDS_STORE, f"the conversation's items come first, and this response's are added to it; needs the store ({STORE_ENV})"),
}

FIELDS.update({
    "presence_penalty": (Treatment.HONORED, f"[-{PENALTY_LIMIT:g}, {PENALTY_LIMIT:g}]"),
    "frequency_penalty": (Treatment.HONORED, f"[-{PENALTY_LIMIT:g}, {PENALTY_LIMIT:g}]"),
    "repetition_penalty": (Treatment.HONORED, f"(0, {MAX_REPETITION_PENALTY:g}]; 1 is off"),
    "stop_token_ids": (Treatment.HONORED, f"token ids that end the answer: at most {MAX_TOKEN_ID_ENTRIES}, each 0..{MAX_TOKEN_ID}"),
    "ignore_eos": (Treatment.HONORED, "keep generating past end-of-sequence"),
    "skip_special_tokens": (Treatment.HONORED, "default true"),
    "spaces_between_special_tokens": (Treatment.HONORED, "default true"),
    "include_stop_str_in_output": (Treatment.HONORED, "keep the matched stop string in the text"),
    "logit_bias": (Treatment.HONORED, f"at most {MAX_TOKEN_ID_ENTRIES} integer token ids, each 0..{MAX_TOKEN_ID}; finite values clamped to [-{LOGIT_BIAS_LIMIT:g}, {LOGIT_BIAS_LIMIT:g}]"),
    "include_reasoning": (Treatment.HONORED, "false leaves the reasoning item out of output; usage still counts it"),
    "include": (Treatment.HONORED, "message.output_text.logprobs gives logprobs on message text (function-call tokens have none); reasoning.encrypted_content seals each reasoning item's text into encrypted_content (SPATE_ENCRYPTION_KEYS; with no key nothing is sealed and a warning is logged); the includes for server-side tool calls and image inputs (file_search_call.results, web_search_call.results, web_search_call.action.sources, message.input_image.image_url, computer_call_output.output.image_url, code_interpreter_call.outputs) are accepted no-ops: no such item is ever in the output"),
    "top_logprobs": (Treatment.HONORED, f"0..{MAX_TOP_LOGPROBS} alternatives per token, with include message.output_text.logprobs; echoed"),
    "truncation": (Treatment.HONORED, "auto drops the oldest turns to fit; disabled (default) fails a long input on input; echoed"),
    "request_id": (Treatment.HONORED, "becomes the response id: ASCII letters, digits, `_` and `-`, at most 200; one namespace across keys: an id any response has (or a concurrent request claims first) is a 409"),
    "priority": (Treatment.HONORED, f"scheduler priority, lower runs first: SPATE_PRIORITY_FLOOR (0 unless the operator lowers it)..{PRIORITY_LIMIT}"),
    "cache_salt": (Treatment.HONORED, "non-empty; isolates prefix-cache reuse"),
    "enable_response_messages": (Treatment.HONORED, "input_messages / output_messages carry the rendered text and token ids"),
    "session_id": (Treatment.HONORED, "carried on the request event as a routing hint"),
    "kv_transfer_params": (Treatment.HONORED, "carried on the request event; echoed"),
    "ec_transfer_params": (Treatment.HONORED, "carried on the request event"),
    "vllm_xargs": (Treatment.HONORED, "carried on the request event"),
    "max_tool_calls": (Treatment.ECHOED, f"1..{MAX_TOOL_CALLS}"),
    "parallel_tool_calls": (Treatment.HONORED, "false: at most one function call per response; echoed"),
    "service_tier": (Treatment.ECHOED, "every tier is served by the same queue"),
    "prompt_cache_key": (Treatment.HONORED, f"at most {MAX_PROMPT_CACHE_KEY_CHARS} characters; carried on the request event, where consumers and routing read it; prefix reuse itself is scoped by the owner and cache_salt; echoed"),
    "prompt_cache_options": (Treatment.ECHOED, "mode, ttl and comparison_response_id are no-ops (the prefix cache is implicit and kept while KV memory allows); prewarm true is a 400 (it would generate nothing, and served as a request it would generate)"),
    "prompt_cache_retention": (Treatment.ECHOED, "no-op: the prefix cache lives in the worker's KV memory for as long as it fits"),
    "safety_identifier": (Treatment.ECHOED, f"at most {MAX_SAFETY_IDENTIFIER_CHARS} characters"),
    "client_metadata": (Treatment.HONORED, "at most 16 string pairs (keys up to 64, values up to 4096 characters); carried on the request event, for consumers and logs; not echoed"),
    "access_programs": (Treatment.NO_OP, "cyber 'standard' (every model runs as Standard; the Response's access_programs stays null, the Standard fallback); the Daybreak programs: 400"),
    "background_options": (Treatment.NO_OP, "a background response starts at once, which meets every completion_window; 2h and 8h need background true and stream false (else 400); continuation_id is accepted"),
    "image": (Treatment.NO_OP, "context_compression: image options, and the served models take no images"),
    "stream_options": (Treatment.NO_OP, "include_obfuscation: delta events carry no obfuscation padding either way (serve spate behind TLS you control); reasoning_summary_delivery: sequential_cutoff (what Codex sends) is how spate always streams, each output item to its end before the next starts; any other value is a 400 naming stream_options.reasoning_summary_delivery"),
})

FIELDS.update({
    "tools": (Treatment.HONORED, "offered to the model: function tools; namespace tools (their functions and custom tools are called as namespace.name); custom tools (free text, or a grammar format in lark or regex syntax that constrained decoding holds the input to; a grammar that does not compile is a 400 naming tools[i].format); the client-run built-ins local_shell, shell (environment local or none) and apply_patch, with fixed schemas, each answered as its own item type. Never offered, by SPATE_SERVER_TOOLS: tools that run on the server's side (web_search, web_search_preview, file_search, code_interpreter, image_generation, mcp, computer, computer_use_preview, tool_search, programmatic_tool_calling, a shell in a container): echoed as declared (omit, the default) or a 400 naming the tool (reject). Other types: 400 naming the type. Echoed, a function's parameters and strict always present"),
    "tool_choice": (Treatment.HONORED, "none, auto, required, a named function or custom tool, apply_patch or shell, or allowed_tools (entries naming server-side tools allow nothing callable); calls are shaped by constrained decoding, and required or named ones forced; forcing a server-side tool: 400; echoed"),
    "structured_outputs": (Treatment.HONORED, "exactly one of json (a schema), regex, choice, grammar (EBNF); not together with a JSON text.format"),
})

FIELDS.update({
    "prompt": (Treatment.REJECTED, "not supported: a reusable prompt (id, version, variables) names a template kept on OpenAI's platform, and spate keeps no prompt templates"),
    "previous_input_messages": (Treatment.REJECTED, "not supported: earlier turns as vLLM's Harmony messages (gpt-oss); send them as input items or use previous_response_id"),
    "media_io_kwargs": (Treatment.REJECTED, "not supported: options for loading images, audio or video, and the served models are text-only"),
    "mm_processor_kwargs": (Treatment.REJECTED, "not supported: options for a multimodal processor, and the served models are text-only"),
    "watermarking": (Treatment.REJECTED, "not supported: spate marks no output, and a response served without the asked-for watermark would pass as marked"),
})
FIELDS["context_management"] = (Treatment.HONORED, "one entry, type compaction: when the input passes compact_threshold tokens (at least 1,000; counted by a worker with the chat template; no threshold: 80% of the model's context), its older turns are replaced by a compaction item the served model writes, which opens the response's output (docs/api.md, Compaction)")
FIELDS["moderation"] = (Treatment.REJECTED, "not supported: spate runs no moderation model, and a response served without the asked-for moderation would pass as moderated")

# The value that leaves a refused field's feature off, where it is not null. Clients send
# fields at their defaults (`background: false`, `previous_response_id: null`), and asking
# for nothing must not be refused.
OFF_VALUES: dict[str, object] = {"background": False}


def is_off(name: str, value: object) -> bool:
    """Whether `value` leaves the field's feature off: null, or the field's off value.
    Compared by identity, so `0` does not pass for `false`."""
    return value is None or value is OFF_VALUES.get(name)


def rejection_message(name: str, value: object) -> str | None:
    """The 400 message for a field this server refuses at `value`, or None when it takes it."""
    treatment, note = FIELDS[name]
    if treatment in (Treatment.REJECTED, Treatment.NEEDS_STORE) and is_off(name, value):
        return None
    if treatment is Treatment.REJECTED:
        return f"'{name}' is {note}."
    return None


def store_field_message(name: str) -> str:
    """The 400 message for a stateful field sent while the store is off."""
    return f"'{name}' needs the response store; set {STORE_ENV} to enable it."
