"""Harmony, gpt-oss's chat format: a conversation rendered as openai-harmony renders it for
completion, piece by piece, so that tokenizing each piece alone (formatting tokens as their
special ids, every other piece as plain text) gives the library's token ids.

    <|start|>system<|message|>...Reasoning: medium...<|end|>
    <|start|>developer<|message|># Instructions ... # Tools ...<|end|>
    <|start|>user<|message|>What is the weather in Paris?<|end|>
    <|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city":"Paris"}<|call|>
    <|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>
    <|start|>assistant

Earlier reasoning is dropped as the library drops it: when the last assistant message is a
`final` one, the `analysis` messages before the first `final` message go.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from workers.model.harmony_tools import ToolNamespace, tools_section

START = "<|start|>"
END = "<|end|>"
MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"
CONSTRAIN = "<|constrain|>"
RETURN = "<|return|>"
CALL = "<|call|>"
FORMATTING_TOKENS = (START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL)

CHANNELS = ("analysis", "commentary", "final")
EFFORTS = ("low", "medium", "high")
DEFAULT_MODEL_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
DEFAULT_KNOWLEDGE_CUTOFF = "2024-06"
# Reasoning as the engine's think markers see it: an analysis message's opening (after the
# `<|start|>assistant` the prompt or an earlier message wrote) and its end.
ANALYSIS_START = f"{CHANNEL}analysis{MESSAGE}"
ANALYSIS_END = END
# What a thinking budget forces after ANALYSIS_END: the final answer's header.
FINAL_OPENING = f"{START}assistant{CHANNEL}final{MESSAGE}"
# The content type of a call's JSON arguments, as the model writes it.
JSON_CONTENT_TYPE = f"{CONSTRAIN}json"

Role = Literal["system", "developer", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class SystemContent:
    reasoning_effort: str | None = "medium"
    model_identity: str | None = DEFAULT_MODEL_IDENTITY
    knowledge_cutoff: str | None = DEFAULT_KNOWLEDGE_CUTOFF
    conversation_start_date: str | None = None
    channels: tuple[str, ...] = CHANNELS
    tools: tuple[ToolNamespace, ...] = ()

    def text(self, has_function_tools: bool) -> str:
        sections = []
        top = [line for line in (
            self.model_identity,
            None if self.knowledge_cutoff is None else f"Knowledge cutoff: {self.knowledge_cutoff}",
            None if self.conversation_start_date is None
            else f"Current date: {self.conversation_start_date}",
        ) if line is not None]
        if top:
            sections.append("\n".join(top))
        if self.reasoning_effort is not None:
            sections.append(f"Reasoning: {self.reasoning_effort}")
        if self.tools:
            sections.append(tools_section(self.tools))
        if self.channels:
            header = f"# Valid channels: {', '.join(self.channels)}. Channel must be included for every message."
            if has_function_tools:
                header += "\nCalls to these tools must go to the commentary channel: 'functions'."
            sections.append(header)
        return "\n\n".join(sections)


@dataclass(frozen=True, slots=True)
class DeveloperContent:
    instructions: str | None = None
    tools: tuple[ToolNamespace, ...] = ()

    def text(self) -> str:
        sections = []
        if self.instructions is not None:
            sections += ["# Instructions", self.instructions]
        if self.tools:
            sections.append(tools_section(self.tools))
        return "\n\n".join(sections)

    @property
    def has_function_tools(self) -> bool:
        return any(namespace.name == "functions" and namespace.tools for namespace in self.tools)


@dataclass(frozen=True, slots=True)
class HarmonyMessage:
    role: Role
    content: str | SystemContent | DeveloperContent = ""
    # A tool message's author: the tool's name (`functions.get_weather`).
    name: str | None = None
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None


# (text, whether it is one formatting token): the unit the library tokenizes.
Segment = tuple[str, bool]


@dataclass(slots=True)
class HarmonyPrompt:
    segments: list[Segment] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.segments)

    def token_ids(self, encode: Callable[[str, bool], list[int]]) -> list[int]:
        """`encode(text, parse_special)` over each piece: only formatting tokens are special,
        so a `<|end|>` a user wrote stays text."""
        return [token_id for text, special in self.segments for token_id in encode(text, special)]

    def special(self, token: str) -> None:
        self.segments.append((token, True))

    def plain(self, text: str) -> None:
        if text:
            self.segments.append((text, False))


def render_message(message: HarmonyMessage, prompt: HarmonyPrompt, has_function_tools: bool) -> None:
    prompt.special(START)
    if message.role == "tool":
        if not message.name:
            raise ValueError("a tool message needs the tool's name")
        prompt.plain(message.name)
    else:
        prompt.plain(message.role)
        if message.name:
            prompt.plain(f":{message.name}")
    if message.recipient is not None and message.recipient != "all":
        prompt.plain(f" to={message.recipient}")
    if message.channel is not None:
        prompt.special(CHANNEL)
        prompt.plain(message.channel)
    if message.content_type is not None:
        if message.content_type.startswith(CONSTRAIN):
            prompt.plain(" ")
            prompt.special(CONSTRAIN)
            prompt.plain(message.content_type.removeprefix(CONSTRAIN))
        else:
            prompt.plain(f" {message.content_type}")
    prompt.special(MESSAGE)
    content = message.content
    if isinstance(content, SystemContent):
        prompt.plain(content.text(has_function_tools))
    elif isinstance(content, DeveloperContent):
        prompt.plain(content.text())
    else:
        prompt.plain(content)
    calls_tool = message.role == "assistant" and message.recipient is not None
    prompt.special(CALL if calls_tool else END)


def render_for_completion(messages: Sequence[HarmonyMessage]) -> HarmonyPrompt:
    """The conversation and the assistant's turn opened (`<|start|>assistant`)."""
    has_function_tools = any(
        isinstance(message.content, DeveloperContent) and message.content.has_function_tools
        for message in messages
    )
    prompt = HarmonyPrompt()
    for message in without_dropped_analysis(messages):
        render_message(message, prompt, has_function_tools)
    prompt.special(START)
    prompt.plain("assistant")
    return prompt


def without_dropped_analysis(messages: Sequence[HarmonyMessage]) -> list[HarmonyMessage]:
    """The library's rule: with a `final` message as the last assistant message, the
    `analysis` messages before the first `final` message are left out."""
    last_assistant = next((m for m in reversed(messages) if m.role == "assistant"), None)
    if last_assistant is None or last_assistant.channel != "final":
        return list(messages)
    first_final = next(i for i, m in enumerate(messages) if m.channel == "final")
    return [m for i, m in enumerate(messages) if not (i < first_final and m.channel == "analysis")]


def answer_opening(reasoning_start: str | None, reasoning_end: str) -> str:
    """What must follow a forced end of reasoning for the answer to begin: harmony's final
    header after an analysis message; nothing for think-tag formats."""
    return FINAL_OPENING if (reasoning_start, reasoning_end) == (ANALYSIS_START, ANALYSIS_END) else ""
