"""Turns each step's new tokens into text deltas on two channels: incremental detokenizing,
the reasoning/text split at the think markers, and stop strings, EOS and stop tokens.

Tokens inside a think block go to channel "reasoning", the others to "text"; the markers'
own tokens go to neither. A token that could be the opening of a marker waits until the
marker is complete or ruled out. Stop strings end only the answer: they are matched in the
text channel, so a reasoning passage never cuts a response short.
"""

from __future__ import annotations

from workers.engine.output_state import Delta, OutputState, TokenLogprob
from workers.engine.sequence import Sequence
from workers.engine.thinking_budget import ThinkEvent, ThinkingBudget
from workers.model.detokenizer import IncrementalDetokenizer
from workers.model.tokenizer import Tokenizer

REASONING = "reasoning"
TEXT = "text"


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer, thinking: ThinkingBudget | None) -> None:
        self.tokenizer = tokenizer
        self.thinking = thinking
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids)

    def begin(self, seq: Sequence) -> None:
        """Called once the think state is set, before any output token is processed."""
        seq.output_state = OutputState(
            channel=REASONING if seq.think.in_block else TEXT,
            detokenizer=self._detokenizer(seq, len(seq.token_ids) - seq.num_output_tokens),
        )

    def stop_token_reason(self, seq: Sequence, token_id: int) -> str | None:
        """Finish reason a token causes by its id alone, before its text is looked at."""
        if seq.params.ends_sequence(token_id, self.eos_token_ids):
            return "stop"
        if seq.num_tokens >= seq.max_num_tokens:
            return "length"
        return None

    def process_token(
        self,
        seq: Sequence,
        token_id: int,
        logprob: TokenLogprob | None,
        think_event: ThinkEvent | None,
        finish_reason: str | None,
    ) -> str | None:
        """Adds the text of a token just appended to `seq` to this step's deltas; returns
        the finish reason, which a stop string may set."""
        state = _state_of(seq)
        if finish_reason == "stop" and not seq.params.sampling.include_stop_str_in_output:
            # An EOS or stop token ends the output without text of its own.
            return self._finish(seq) or finish_reason
        state.pending_token_ids.append(token_id)
        state.pending_logprobs.append(logprob)
        if think_event is not None and self.thinking is not None:
            # Think events come only from a ThinkingBudget, so `thinking` is set here.
            markers = self.thinking.markers
            marker = (
                markers.start_token_ids
                if think_event is ThinkEvent.OPENED
                else markers.end_token_ids
            )
            stop_reason = self._release(seq, len(state.pending_token_ids) - len(marker))
            # The marker's own tokens belong to no channel.
            state.pending_token_ids.clear()
            state.pending_logprobs.clear()
            if stop_reason is not None:
                return stop_reason
            self._flush_channel(seq)
            state.channel = REASONING if think_event is ThinkEvent.OPENED else TEXT
            state.detokenizer = self._detokenizer(seq, len(seq.token_ids))
        else:
            awaiting_marker = self.thinking.partial_marker_length(seq) if self.thinking else 0
            stop_reason = self._release(seq, len(state.pending_token_ids) - awaiting_marker)
            if stop_reason is not None:
                return stop_reason
        if finish_reason is not None:
            return self._finish(seq) or finish_reason
        return None

    def take_deltas(self, seq: Sequence) -> list[Delta]:
        state = _state_of(seq)
        deltas, state.deltas = state.deltas, []
        return deltas

    def _release(self, seq: Sequence, count: int) -> str | None:
        """Gives the first `count` pending tokens to the current channel; "stop" if their
        text completes a stop string."""
        state = _state_of(seq)
        if count <= 0:
            return None
        token_ids = state.pending_token_ids[:count]
        logprobs = state.pending_logprobs[:count]
        del state.pending_token_ids[:count]
        del state.pending_logprobs[:count]
        text = "".join(state.detokenizer.push(token_id) for token_id in token_ids)
        reported_logprobs = logprobs if seq.params.sampling.top_logprobs is not None else None
        if state.channel == REASONING or not seq.params.sampling.stop:
            self._emit(state, text, token_ids, reported_logprobs)
            return None
        return self._emit_checking_stop_strings(seq, text, token_ids, reported_logprobs)

    def _emit_checking_stop_strings(
        self, seq: Sequence, text: str, token_ids: list[int], logprobs: list[TokenLogprob | None] | None
    ) -> str | None:
        state = _state_of(seq)
        held = state.held_text + text
        sampling = seq.params.sampling
        earliest: tuple[int, str] | None = None
        for stop in sampling.stop:
            position = held.find(stop)
            if position >= 0 and (earliest is None or position < earliest[0]):
                earliest = (position, stop)
        if earliest is not None:
            position, stop = earliest
            end = position + len(stop) if sampling.include_stop_str_in_output else position
            state.held_text = ""
            self._emit(state, held[:end], token_ids, logprobs)
            return "stop"
        # Any stop string that completes later starts inside the held tail, so the tail
        # that could still open one waits and the rest goes out.
        keep = max((_overlap(held, stop) for stop in sampling.stop), default=0)
        state.held_text = held[len(held) - keep :] if keep else ""
        self._emit(state, held[: len(held) - keep], token_ids, logprobs)
        return None

    def _flush_channel(self, seq: Sequence) -> None:
        state = _state_of(seq)
        text = state.held_text + state.detokenizer.flush()
        state.held_text = ""
        self._emit(state, text, [], None)

    def _finish(self, seq: Sequence) -> str | None:
        """Ends the output: tokens that waited for a marker that never came are plain
        tokens of their channel after all, and held text that opened no stop string goes
        out. Returns "stop" if those last tokens complete a stop string."""
        stop_reason = self._release(seq, len(_state_of(seq).pending_token_ids))
        if stop_reason is None:
            self._flush_channel(seq)
        return stop_reason

    @staticmethod
    def _emit(state: OutputState, text: str, token_ids: list[int], logprobs: list[TokenLogprob | None] | None) -> None:
        if not text and not token_ids:
            return
        last = state.deltas[-1] if state.deltas else None
        if last is not None and last.channel == state.channel:
            last.text += text
            last.token_ids.extend(token_ids)
            if logprobs is not None:
                last.logprobs = (last.logprobs or []) + logprobs
            return
        state.deltas.append(Delta(state.channel, text, list(token_ids), logprobs))

    def _detokenizer(self, seq: Sequence, start: int) -> IncrementalDetokenizer:
        # The tokens before `start` are context only, so a decoder that treats the start of
        # text specially sees where this channel's text really begins.
        return IncrementalDetokenizer(
            self.tokenizer, seq.params.sampling.skip_special_tokens, prompt_token_ids=seq.token_ids[:start]
        )


def _state_of(seq: Sequence) -> OutputState:
    if seq.output_state is None:
        raise RuntimeError(f"OutputProcessor.begin was not called for {seq.request_id!r}")
    return seq.output_state


def _overlap(text: str, stop: str) -> int:
    """Length of the longest end of `text` that is a proper beginning of `stop`."""
    for length in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:length]):
            return length
    return 0
