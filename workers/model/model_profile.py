"""ModelProfile: what the engine and the API need to know about a served model's conventions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workers.model.chat_template import ChatTemplate
from workers.model.reasoning_format import (
    ThinkingSwitch,
    detect_reasoning_format,
    prompt_opens_block,
)
from workers.model.tool_call_markup import detect_tool_call_format


@dataclass(frozen=True, slots=True)
class ModelProfile:
    name: str
    context_length: int
    reasoning_start: str | None = None
    reasoning_end: str | None = None
    tool_call_format: str | None = None
    # How `enable_thinking` reaches the template (workers/model/reasoning_format.py), and
    # whether its generation prompt opens the think block itself.
    thinking_switch: ThinkingSwitch | None = None
    template_opens_reasoning: bool = False
    default_chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    # Sampling values the model's authors recommend (temperature, top_p, top_k, min_p);
    # a request that leaves one out gets this instead of the API-wide default.
    default_sampling: Mapping[str, float] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if (self.reasoning_start is None) != (self.reasoning_end is None):
            raise ValueError("reasoning_start and reasoning_end are set together or not at all")
        if self.context_length <= 0:
            raise ValueError(f"context_length must be positive, got {self.context_length}")

    @property
    def supports_reasoning(self) -> bool:
        return self.reasoning_start is not None

    def prompt_opens_reasoning(self, rendered_prompt: str) -> bool:
        """True when the prompt ends inside a think block, so the first output token is reasoning.

        A closed block in an earlier turn does not count: only the last start marker, and
        only when no end marker follows it.
        """
        if self.reasoning_start is None or self.reasoning_end is None:
            return False
        return prompt_opens_block(rendered_prompt, self.reasoning_start, self.reasoning_end)

    def describe_reasoning(self) -> str:
        """The reasoning format in one line ("none" without markers)."""
        if self.reasoning_start is None:
            return "none"
        opener = "the template" if self.template_opens_reasoning else "the model"
        if self.thinking_switch is None:
            switch = "always on"
        elif self.thinking_switch.kind == "keyword":
            switch = f"switched by `{self.thinking_switch.keyword}`"
        else:
            switch = "switched by the default system prompt"
        return f"{self.reasoning_start}...{self.reasoning_end}, opened by {opener}, {switch}"


SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


def detect_profile(
    name: str,
    context_length: int,
    vocab: Mapping[str, int],
    chat_template: str | None,
    generation_config: Mapping[str, Any] | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
) -> ModelProfile:
    """A profile from what the checkpoint shows: its vocabulary and its chat template
    (rendered to see how it opens and switches reasoning)."""
    template = None
    if chat_template:
        try:
            template = ChatTemplate(chat_template, bos_token, eos_token)
        except ValueError:
            template = None  # the loader reports a template that does not parse
    reasoning = detect_reasoning_format(vocab, template)
    return ModelProfile(
        name=name,
        context_length=context_length,
        reasoning_start=reasoning.start if reasoning else None,
        reasoning_end=reasoning.end if reasoning else None,
        tool_call_format=_tool_call_format(template),
        thinking_switch=reasoning.switch if reasoning else None,
        template_opens_reasoning=reasoning.opened_by_template if reasoning else False,
        default_chat_template_kwargs=dict(reasoning.default_kwargs or {}) if reasoning else {},
        default_sampling={
            key: value for key, value in (generation_config or {}).items()
            if key in SAMPLING_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool)
        },
    )


def _tool_call_format(template: ChatTemplate | None) -> str | None:
    """The markup the template writes an assistant's call in, where spate parses it."""
    if template is None or "tools" not in template.source:
        return None
    return detect_tool_call_format(lambda messages, tools: template.render(messages, tools=tools))
