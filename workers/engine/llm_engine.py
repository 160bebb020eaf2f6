"""LLMEngine: requests in, per-step RequestOutputs out; ties the scheduler, the model runner,
the think-budget logic and the output processor together. Synchronous: the worker calls
it from a thread of its own."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from collections.abc import Sequence as TokenIds
from dataclasses import dataclass, field
from typing import Any

from workers.engine.answer_grammar import AnswerGrammar
from workers.engine.block_manager import BlockManager
from workers.engine.config import EngineConfig
from workers.engine.grammar import advance as advance_grammar
from workers.engine.model_runner import ModelRunner
from workers.engine.output_processor import OutputProcessor
from workers.engine.output_state import Delta
from workers.engine.sampler import SamplerOutput
from workers.engine.sampling_params import SamplingParams
from workers.engine.scheduler import Scheduler
from workers.engine.sequence import Sequence, SequenceStatus
from workers.engine.speculation import Speculator
from workers.engine.thinking_budget import ReasoningMarkers, ThinkEvent, ThinkingBudget
from workers.model.attention import kv_release_window
from workers.model.loader import LoadedModel

# Sequences run together, their forced tokens, and what sampling gave them.
StepResult = tuple[list[Sequence], list[int | None], SamplerOutput]

log = logging.getLogger("spate.worker.engine")


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    # Text of this step by channel ("reasoning" or "text"), in order.
    deltas: list[Delta]
    # Every token generated this step, markers included: what a resumed request is given
    # back as output_token_ids.
    new_token_ids: list[int]
    # "model" or "budget" when a think block closed this step.
    reasoning_ended: str | None
    finished: bool
    # "stop", "length" or "cancelled" once finished.
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    num_reasoning_tokens: int
    num_cached_tokens: int
    # Only on a resumed request's first output: the text its output_token_ids made, which
    # was streamed before; for per-response state kept outside the engine (a tool-call
    # parser) to catch up on.
    replayed_deltas: list[Delta] = field(default_factory=list)
    # Set (with finish_reason "error") when this request alone failed: an unexpected
    # error in its own token processing, which fails it and not the batch it ran in.
    error: str | None = None


class LLMEngine:
    def __init__(self, loaded: LoadedModel, config: EngineConfig | None = None) -> None:
        self.config = config = config or EngineConfig()
        self.tokenizer = loaded.tokenizer
        self.vocab_size = loaded.config.vocab_size
        self.model_runner = ModelRunner(loaded, config)
        num_kv_blocks = self.model_runner.num_kv_blocks
        # Prompts are never split across steps, so a sequence (which may have to be
        # recomputed whole after preemption) must fit one prefill step and the cache.
        self.max_model_len = min(
            config.max_model_len or loaded.profile.context_length,
            loaded.config.max_position_embeddings,
            config.max_num_batched_tokens,
            num_kv_blocks * config.block_size,
        )
        # A model whose every layer slides gives back the blocks before each window.
        self.block_manager = BlockManager(
            num_kv_blocks, config.block_size, release_window=kv_release_window(loaded.model)
        )
        self.scheduler = Scheduler(
            self.block_manager, config.max_num_seqs, config.max_num_batched_tokens
        )
        markers = ReasoningMarkers.from_strings(
            loaded.profile.reasoning_start, loaded.profile.reasoning_end, self.tokenizer.encode
        )
        self.thinking = (
            ThinkingBudget(markers, self.tokenizer.blank_token_ids())
            if markers is not None else None
        )
        self.output_processor = OutputProcessor(self.tokenizer, self.thinking)
        self._arrival_orders = itertools.count()
        self._sequences: dict[str, Sequence] = {}
        # Outputs decided between steps (cancellations), handed out by the next step().
        self._outputs_between_steps: list[RequestOutput] = []
        self._replayed_deltas: dict[str, list[Delta]] = {}
        self.speculator: Speculator | None = None
        if config.speculation.enabled and self.model_runner.prefill_rows_exact:
            self.speculator = Speculator(config.speculation, self.block_manager)

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: TokenIds[int],
        params: SamplingParams,
        output_token_ids: TokenIds[int] = (),
        prompt_opens_reasoning: bool = False,
    ) -> None:
        """Queues a request. A non-empty `output_token_ids` resumes one that another engine
        began: those tokens count as generated, the think state is rebuilt from them, and
        they are prefilled with the prompt. Their text is not produced again."""
        if request_id in self._sequences:
            raise ValueError(f"request {request_id!r} is already running")
        if not prompt_token_ids:
            raise ValueError("the prompt is empty")
        self._check_token_ids(prompt_token_ids, "prompt")
        self._check_token_ids(output_token_ids, "output")
        self._check_token_ids(params.sampling.logit_bias, "logit_bias")
        if params.thinking_token_budget is not None and self.thinking is None:
            raise ValueError("thinking_token_budget needs a model with reasoning markers")
        num_tokens = len(prompt_token_ids) + len(output_token_ids)
        if num_tokens >= self.max_model_len:
            raise ValueError(
                f"{num_tokens} tokens leave no room to generate within the "
                f"{self.max_model_len}-token limit"
            )
        max_num_tokens = self.max_model_len
        max_output_tokens = params.sampling.max_output_tokens
        if max_output_tokens is not None:
            max_num_tokens = min(max_num_tokens, len(prompt_token_ids) + max_output_tokens)
        seq = Sequence(
            request_id, next(self._arrival_orders), prompt_token_ids, params, max_num_tokens
        )
        if params.grammar is not None:
            seq.grammar = AnswerGrammar(params.grammar)
        if self.thinking is not None:
            self.thinking.begin(seq, prompt_opens_reasoning)
        self.output_processor.begin(seq)
        self._replay(seq, output_token_ids)
        if seq.num_tokens >= seq.max_num_tokens:
            # The earlier engine stopped just short of reporting the length limit.
            self._outputs_between_steps.append(self._output(seq, [], None, "length"))
            return
        if seq.grammar is not None and seq.grammar.terminated:
            # The earlier engine ended the answer's grammar just before it could report it.
            self._outputs_between_steps.append(self._output(seq, [], None, "stop"))
            return
        self._sequences[request_id] = seq
        self.scheduler.add(seq)

    def _replay(self, seq: Sequence, output_token_ids: TokenIds[int]) -> None:
        """Runs earlier output through the same state updates as live tokens (think state,
        grammar, output text). Their text was streamed before, so it is not produced again:
        the first output only reports it as `replayed_deltas`."""
        for token_id in output_token_ids:
            forced = self.thinking.forced_token(seq) if self.thinking is not None else None
            advance_grammar(seq, token_id, forced)
            seq.append_token(token_id)
            event = self.thinking.observe(seq, token_id) if self.thinking is not None else None
            self.output_processor.process_token(seq, token_id, None, event, None)
        replayed = self.output_processor.take_deltas(seq)
        if replayed:
            self._replayed_deltas[seq.request_id] = replayed
        if seq.params.sampling.seed is not None and not seq.params.greedy:
            seq.draws.num_to_replay = len(output_token_ids)

    def _check_token_ids(self, token_ids: Iterable[int], what: str) -> None:
        for token_id in token_ids:
            if not 0 <= token_id < self.vocab_size:
                raise ValueError(f"{what} token id {token_id} is outside the vocabulary")

    def cancel(self, request_id: str) -> bool:
        """Stops a request at once and frees its KV blocks; the next step() reports it as
        finished with reason "cancelled". False if the request is unknown or done."""
        seq = self._sequences.pop(request_id, None)
        if seq is None:
            return False
        self.scheduler.finish(seq, "cancelled")
        self._outputs_between_steps.append(self._output(seq, [], None, "cancelled"))
        return True

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._outputs_between_steps)

    def step(self) -> list[RequestOutput]:
        outputs, self._outputs_between_steps = self._outputs_between_steps, []
        if not self.scheduler.has_unfinished():
            return outputs
        seqs, is_prefill = self.scheduler.schedule()
        if not seqs:
            return outputs
        drafts = None if is_prefill or self.speculator is None else self.speculator.drafts(seqs)
        if drafts is not None:
            verified = self._speculative_step(seqs, drafts)
            if verified is not None:
                return outputs + verified
        forced_token_ids = [
            self.thinking.forced_token(seq) if self.thinking is not None else None for seq in seqs
        ]
        try:
            run = self.model_runner.run(seqs, is_prefill, forced_token_ids)
            sampled = [(seqs, forced_token_ids, run)]
        except Exception as error:
            if len(seqs) == 1:
                self.scheduler.block_manager.forget_uncomputed(seqs)
                raise
            log.exception("a step of %d sequences failed; running each alone", len(seqs))
            sampled, failed = self._run_each_alone(seqs, is_prefill, forced_token_ids, error)
            self.scheduler.block_manager.forget_uncomputed(seq for seq, _ in failed)
            outputs.extend(self._fail(seq, seq_error) for seq, seq_error in failed)
        for batch, forced_ids, result in sampled:
            for seq, token_id, logprob, forced in zip(
                batch, result.token_ids, result.logprobs, forced_ids, strict=True
            ):
                try:
                    outputs.append(self._advance(seq, token_id, logprob, forced))
                except Exception as error:
                    log.exception("request %s failed in its token processing", seq.request_id)
                    outputs.append(self._fail(seq, error))
        return outputs

    def _speculative_step(
        self, seqs: list[Sequence], drafts: list[list[int]]
    ) -> list[RequestOutput] | None:
        """A decode step that verifies drafts: one forward pass scores each sequence's last
        token and draft, then the sampler takes the rows in order, each sequence with its
        state of that moment (forced tokens, grammar, penalties, seed), for as long as it
        picks the drafted token; its pick where it does not is the step's last token.
        None where the forward pass failed: the step is then decoded plainly."""
        try:
            logits = self.model_runner.score(seqs, drafts)
        except Exception:
            log.exception("verifying drafts of %d sequences failed; decoding plainly", len(seqs))
            for seq in seqs:
                self.block_manager.release_unused_slots(seq)
            return None
        first_rows = list(itertools.accumulate((1 + len(draft) for draft in drafts), initial=0))
        taken: list[list[int]] = [[] for _ in seqs]
        failed: set[int] = set()
        events: list[ThinkEvent | None] = [None] * len(seqs)
        finish_reasons: list[str | None] = [None] * len(seqs)
        outputs: list[RequestOutput] = []
        live, depth = list(range(len(seqs))), 0
        try:
            while live:
                batch = [seqs[index] for index in live]
                forced_ids = [
                    self.thinking.forced_token(seq) if self.thinking is not None else None
                    for seq in batch
                ]
                rows = logits[[first_rows[index] + depth for index in live]]
                sampled = self.model_runner.sampler(rows, batch, forced_ids)
                still_live = []
                for index, token_id, logprob, forced in zip(
                    live, sampled.token_ids, sampled.logprobs, forced_ids, strict=True
                ):
                    seq, draft = seqs[index], drafts[index]
                    try:
                        event, finish_reasons[index] = self._take_token(seq, token_id, logprob, forced)
                    except Exception as error:
                        log.exception("request %s failed in its token processing", seq.request_id)
                        outputs.append(self._fail(seq, error))
                        failed.add(index)
                        continue
                    taken[index].append(token_id)
                    if event is not None and event is not ThinkEvent.OPENED:
                        events[index] = event
                    if finish_reasons[index] is None and depth < len(draft) and token_id == draft[depth]:
                        # Its KV, computed from the drafted token, is the token's own.
                        self.block_manager.cache_computed(seq, seq.num_tokens - 1)
                        still_live.append(index)
                live, depth = still_live, depth + 1
        finally:
            for seq in seqs:
                if seq.status is SequenceStatus.RUNNING:
                    self.block_manager.release_unused_slots(seq)
        for index, (seq, draft, tokens) in enumerate(zip(seqs, drafts, taken, strict=True)):
            if index in failed:
                continue
            finish_reason = finish_reasons[index]
            # Every token but the last matched its draft token (the last may too, where it
            # ended the sequence).
            num_kept = sum(token == drafted for token, drafted in zip(tokens, draft, strict=False))
            refused = finish_reason is None and num_kept < len(draft)
            if self.speculator is not None:
                self.speculator.record(seq, len(draft), num_kept, refused)
            outputs.append(self._output(seq, tokens, events[index], finish_reason))
        return outputs

    def _run_each_alone(
        self,
        seqs: list[Sequence],
        is_prefill: bool,
        forced_token_ids: list[int | None],
        batch_error: Exception,
    ) -> tuple[list[StepResult], list[tuple[Sequence, Exception]]]:
        """After a step of several sequences raised: each alone, so the one at fault fails by
        itself and the rest go on with the very tokens the batch would have given them (a
        row's bits never depend on its batch). If every one fails alone too, the fault is
        not any one sequence's: the batch's error is raised for the caller to handle."""
        sampled: list[StepResult] = []
        failed: list[tuple[Sequence, Exception]] = []
        for seq, forced in zip(seqs, forced_token_ids, strict=True):
            try:
                sampled.append(([seq], [forced], self.model_runner.run([seq], is_prefill, [forced])))
            except Exception as error:
                log.warning("request %s fails its step alone too: %s", seq.request_id, error)
                failed.append((seq, error))
        if not sampled:
            self.scheduler.block_manager.forget_uncomputed(seqs)
            raise batch_error
        return sampled, failed

    def _advance(
        self, seq: Sequence, token_id: int, logprob: Any, forced: int | None
    ) -> RequestOutput:
        """One sampled token through the sequence's grammar, think state and output."""
        event, finish_reason = self._take_token(seq, token_id, logprob, forced)
        return self._output(seq, [token_id], event, finish_reason)

    def _take_token(
        self, seq: Sequence, token_id: int, logprob: Any, forced: int | None
    ) -> tuple[ThinkEvent | None, str | None]:
        """Appends a sampled token and runs it through the grammar, think state and output
        text; ends the sequence where it finishes. Its think event and finish reason."""
        if seq.num_prompt_cached_tokens is None:
            seq.num_prompt_cached_tokens = min(seq.num_cached_tokens, seq.num_prompt_tokens)
        # Before the think state sees the token: the grammar only follows the answer.
        grammar_ended = advance_grammar(seq, token_id, forced)
        seq.append_token(token_id)
        event = self.thinking.observe(seq, token_id) if self.thinking is not None else None
        finish_reason = self.output_processor.stop_token_reason(seq, token_id)
        if finish_reason is None and grammar_ended:
            finish_reason = "stop"
        finish_reason = self.output_processor.process_token(
            seq, token_id, logprob, event, finish_reason
        )
        if finish_reason is not None:
            self.scheduler.finish(seq, finish_reason)
            del self._sequences[seq.request_id]
        return event, finish_reason

    def _fail(self, seq: Sequence, error: Exception) -> RequestOutput:
        """End one request whose processing raised; its blocks are freed, the rest of the
        batch goes on."""
        self._sequences.pop(seq.request_id, None)
        if seq.status is not SequenceStatus.FINISHED:
            self.scheduler.finish(seq, "error")
        return RequestOutput(
            request_id=seq.request_id, deltas=[], new_token_ids=[], reasoning_ended=None,
            finished=True, finish_reason="error", num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=seq.num_output_tokens, num_reasoning_tokens=0,
            num_cached_tokens=seq.num_prompt_cached_tokens or 0,
            error=f"{type(error).__name__}: {error}",
        )

    def _output(
        self,
        seq: Sequence,
        new_token_ids: list[int],
        event: ThinkEvent | None,
        finish_reason: str | None,
    ) -> RequestOutput:
        closed = event is ThinkEvent.CLOSED_BY_MODEL or event is ThinkEvent.CLOSED_BY_BUDGET
        reasoning_ended = event.value if closed and event is not None else None
        return RequestOutput(
            request_id=seq.request_id,
            deltas=self.output_processor.take_deltas(seq),
            new_token_ids=new_token_ids,
            reasoning_ended=reasoning_ended,
            finished=finish_reason is not None,
            finish_reason=finish_reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=seq.num_output_tokens,
            num_reasoning_tokens=(
                self.thinking.reasoning_tokens(seq) if self.thinking is not None else 0
            ),
            num_cached_tokens=seq.num_prompt_cached_tokens or 0,
            replayed_deltas=self._replayed_deltas.pop(seq.request_id, []),
        )
