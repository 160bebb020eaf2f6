"""The normalized request event: what the API accepted, lowered for workers to run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from events.envelope import Event
from events.request_settings import Priority, ThinkingTokenBudget
from events.sampling_settings import SamplingSettings

# What a tool is: a function (JSON arguments), a custom tool (free text input), or a
# client-run built-in with a fixed schema (events/builtin_tools.py), called like a function.
ToolKind = Literal["function", "custom", "local_shell", "shell", "apply_patch"]


class ToolCall(BaseModel):
    """A call an assistant turn made (a `function_call`, `custom_tool_call` or built-in
    call input item)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    call_id: str
    # As the model writes it: `<namespace>.<name>` for a function inside a namespace.
    name: str
    # The arguments as JSON text, as the client sent them back; a custom tool's input text.
    arguments: str
    kind: ToolKind = "function"


class ChatMessage(BaseModel):
    """One turn of the conversation, ready for a chat template."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str
    # Assistant turns: the calls they made. Tool turns: the call they answer.
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    # Assistant turns: the reasoning that led to them (a `reasoning` input item), for
    # templates that render it.
    reasoning: str | None = None


class CustomInputGrammar(BaseModel):
    """What a custom tool's input text must match: a Lark grammar or a regex."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    syntax: Literal["lark", "regex"]
    definition: str


class ToolDefinition(BaseModel):
    """A tool the model may call: a `function` tool, one inside a `namespace` tool, a
    `custom` tool, or a client-run built-in (`local_shell`, `shell`, `apply_patch`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    # As the model writes it: `<namespace>.<name>` inside a namespace.
    name: str
    description: str | None = None
    # JSON schema of the arguments (an object); None: any JSON object. Custom tools: None.
    parameters: dict[str, Any] | None = None
    namespace: str | None = None
    # The request field holding `parameters` (or a custom tool's grammar), named by the
    # error when it cannot be compiled.
    param: str = "tools"
    kind: ToolKind = "function"
    # A custom tool's input grammar; None: free text.
    input_grammar: CustomInputGrammar | None = None


class AnswerConstraint(BaseModel):
    """What the answer text must match (text.format or structured_outputs), enforced by
    constrained decoding after any reasoning."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: Literal["json_object", "json_schema", "regex", "choice", "grammar"]
    json_schema: dict[str, Any] | None = None
    pattern: str | None = None
    choices: tuple[str, ...] = ()
    # EBNF (the GBNF dialect of llama.cpp) with a `root` rule.
    grammar: str | None = None
    # The request field it came from, named by the error when it cannot be compiled.
    param: str


class RequestAccepted(Event):
    """Published once per response: seq 0 of its event log and one message on REQUESTS.

    `thinking_token_budget` is None for an unlimited budget (absent or -1 become None),
    otherwise the number of tokens allowed inside a think block.
    `echo` holds the request fields the Response object repeats back verbatim.
    """

    type: Literal["request.accepted"] = "request.accepted"
    v: Literal[1] = 1

    model: str
    messages: tuple[ChatMessage, ...]
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    thinking_token_budget: ThinkingTokenBudget = None
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    stream: bool = False
    # "auto" drops the oldest turns to fit the context; "disabled" fails a long input.
    truncation: Literal["auto", "disabled"] = "disabled"
    include_reasoning: bool = True
    enable_response_messages: bool = False
    # Scheduling and cache isolation.
    priority: Priority = 0
    cache_salt: str | None = None
    # Routing hint and opaque pass-through for disaggregated deployments.
    session_id: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None
    # What the client said about itself (Codex: its window and turn), for consumers and
    # logs; and its prompt_cache_key, the key of the prefix it means to reuse.
    client_metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    # Function calling. `tool_choice` is lowered: a named function is "required" with that
    # one name allowed; `allowed_tool_names` None allows every tool.
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: Literal["none", "auto", "required"] = "auto"
    allowed_tool_names: tuple[str, ...] | None = None
    parallel_tool_calls: bool = True
    answer_constraint: AnswerConstraint | None = None
    echo: dict[str, Any] = Field(default_factory=dict)
    # Who the request acts for (the tenant): a digest of its API key, or "shared" when
    # the API runs without keys. Always set by the API; it scopes the stored response,
    # the prefix cache and per-key quotas. None only in events written before it was.
    owner: str | None = None
    # The response store (when enabled): whether to keep this response, and the items it
    # was given in the Responses item shapes, with ids: earlier turns (a previous
    # response's or a conversation's) first, this request's own input from
    # `new_input_from` on.
    store: bool = False
    input_items: tuple[dict[str, Any], ...] = ()
    new_input_from: int = Field(default=0, ge=0)
    # The conversation the response's input and output items are added to when it ends.
    conversation_id: str | None = None
    background: bool = False
    # The compaction item (`type`, `id`, `encrypted_content`) that replaced the input's
    # older turns (context_management): the response's output opens with it.
    compaction: dict[str, Any] | None = None

    @property
    def new_input_items(self) -> tuple[dict[str, Any], ...]:
        return self.input_items[self.new_input_from:]
