"""ModelProfile: what the engine and the API need to know about a served model's conventions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Reasoning marker pairs, most specific first. A pair counts when both halves are single
# tokens of the vocabulary (so the model can emit them) or both appear in the template.
REASONING_MARKERS = (("<think>", "</think>"), ("<|begin_of_thought|>", "<|end_of_thought|>"))

# Tool-call conventions recognised from the template: name -> the text that opens a call.
TOOL_CALL_FORMATS = (("hermes", "<tool_call>"), ("llama3_json", "<|python_tag|>"))


@dataclass(frozen=True, slots=True)
class ModelProfile:
    name: str
    context_length: int
    reasoning_start: str | None = None
    reasoning_end: str | None = None
    tool_call_format: str | None = None
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
        start = rendered_prompt.rfind(self.reasoning_start)
        return start >= 0 and rendered_prompt.find(self.reasoning_end, start) < 0


def detect_reasoning_markers(
    vocab: Mapping[str, int], chat_template: str | None
) -> tuple[str, str] | None:
    for start, end in REASONING_MARKERS:
        if start in vocab and end in vocab:
            return start, end
        if chat_template and start in chat_template and end in chat_template:
            return start, end
    return None


def detect_tool_call_format(vocab: Mapping[str, int], chat_template: str | None) -> str | None:
    if not chat_template or "tools" not in chat_template:
        return None
    for name, opener in TOOL_CALL_FORMATS:
        if opener in chat_template or opener in vocab:
            return name
    return None


SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


def detect_profile(
    name: str,
    context_length: int,
    vocab: Mapping[str, int],
    chat_template: str | None,
    generation_config: Mapping[str, Any] | None = None,
) -> ModelProfile:
    """A profile from what the checkpoint shows: its vocabulary and its chat template."""
    markers = detect_reasoning_markers(vocab, chat_template)
    return ModelProfile(
        name=name,
        context_length=context_length,
        reasoning_start=markers[0] if markers else None,
        reasoning_end=markers[1] if markers else None,
        tool_call_format=detect_tool_call_format(vocab, chat_template),
        default_sampling={
            key: value for key, value in (generation_config or {}).items()
            if key in SAMPLING_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool)
        },
    )
