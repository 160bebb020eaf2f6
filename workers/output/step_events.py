"""What one engine step of a response becomes in its log: reasoning and answer text, the
think block closing, function calls, and every token id on some tokens.generated."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from events import ReasoningEnded, RequestAccepted, TokenLogprob, TokensGenerated, Usage
from workers.output.tool_call_events import EventSpec, ToolCallEvents
from workers.output.tool_calls import callable_tools

if TYPE_CHECKING:  # the engine imports torch; this module is read without it
    from workers.engine.llm_engine import RequestOutput
    from workers.engine.output_state import Delta


class StepEvents:
    """One per response, fed its engine outputs in order."""

    def __init__(
        self, request: RequestAccepted, token_text: Callable[[int], str], in_reasoning: bool,
        tool_call_format: str | None = None,
    ) -> None:
        self._token_text = token_text
        # Which channel an id-only event belongs to: whether the think block is open.
        self.in_reasoning = in_reasoning
        # Splits the answer into message text and function calls, when it may call any.
        self.tool_calls = (ToolCallEvents(request, tool_call_format) if callable_tools(request)
                           else None)

    def of(self, output: RequestOutput) -> list[EventSpec]:
        """The events of one step, not counting generation.finished."""
        if self.tool_calls is not None and output.replayed_deltas:
            self.tool_calls.catch_up(
                "".join(d.text for d in output.replayed_deltas if d.channel == "text")
            )
        events: list[EventSpec] = []
        for delta in output.deltas:
            if delta.channel == "reasoning":
                self.in_reasoning = True
                events.append((TokensGenerated, {"channel": "reasoning", "text": delta.text,
                                                 "logprobs": self._logprobs(delta)}))
        if output.reasoning_ended:
            self.in_reasoning = False
            cause = "budget" if output.reasoning_ended == "budget" else "end_marker"
            events.append((ReasoningEnded, {"cause": cause,
                                            "reasoning_tokens": output.num_reasoning_tokens}))
        for delta in output.deltas:
            if delta.channel != "reasoning":
                self.in_reasoning = False
                events.extend(self._answer_events(delta))
        if output.finished and self.tool_calls is not None:
            events.extend(self.tool_calls.on_finish(output.finish_reason))
        return self._with_token_ids(events, tuple(output.new_token_ids))

    def _answer_events(self, delta: Delta) -> list[EventSpec]:
        logprobs = self._logprobs(delta)
        if self.tool_calls is None:
            return [(TokensGenerated, {"channel": "text", "text": delta.text, "logprobs": logprobs})]
        return self.tool_calls.on_text(delta.text, logprobs)

    def _with_token_ids(self, events: list[EventSpec], token_ids: tuple[int, ...]) -> list[EventSpec]:
        """The step's token ids ride on its first tokens.generated. Every id reaches the log
        (a replacement worker rebuilds from them), even in a step whose text is held back."""
        if not token_ids:
            return events
        for index, (event_type, fields) in enumerate(events):
            if event_type is TokensGenerated:
                events[index] = (event_type, {**fields, "token_ids": token_ids})
                return events
        channel = "reasoning" if self.in_reasoning else "text"
        events.append((TokensGenerated, {"channel": channel, "text": "", "token_ids": token_ids}))
        return events

    def _logprobs(self, delta: Delta) -> tuple[TokenLogprob, ...] | None:
        if not delta.logprobs:
            return None
        text = self._token_text
        return tuple(
            TokenLogprob(
                token=text(entry.token_id), logprob=entry.logprob,
                top_logprobs=tuple((text(token_id), logprob) for token_id, logprob in entry.top_logprobs),
            )
            for entry in delta.logprobs
            # Tokens replayed from an earlier worker have none: theirs were streamed then.
            if entry is not None
        )


def usage_of(output: RequestOutput) -> Usage:
    return Usage(
        input_tokens=output.num_prompt_tokens,
        output_tokens=output.num_output_tokens,
        reasoning_tokens=output.num_reasoning_tokens,
        cached_tokens=output.num_cached_tokens,
    )
