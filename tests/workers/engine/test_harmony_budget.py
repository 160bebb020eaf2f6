"""The thinking budget on harmony's channels, with gpt-oss's own token ids (encoded by
openai-harmony): the budget ends the analysis message at `<|end|>` and forces the final
answer's header after it, token by token; the model's own `<|end|>` only ends the block;
the answer may not end before it begins; the tokens parse into a reasoning message and a
final one as openai-harmony parses them."""

from __future__ import annotations

import openai_harmony as oh

from tests.harmony_reference import harmony_encoding
from tests.workers.engine.test_thinking_budget import feed
from workers.engine.sampling_params import SamplingParams as Params
from workers.engine.sequence import Sequence
from workers.engine.thinking_budget import (
    ReasoningMarkers,
    ThinkEvent,
    ThinkingBudget,
    holds_answer_open,
)
from workers.model.harmony import ANALYSIS_END, ANALYSIS_START, FINAL_OPENING


def encode(text: str) -> list[int]:
    return harmony_encoding().encode(text, allowed_special="all")


def harmony_budget(budget: int | None) -> tuple[Sequence, ThinkingBudget]:
    markers = ReasoningMarkers.from_strings(ANALYSIS_START, ANALYSIS_END, encode)
    assert markers is not None
    prompt = encode("<|start|>user<|message|>Hi<|end|><|start|>assistant")
    seq = Sequence("r", 0, prompt, Params(thinking_token_budget=budget), max_num_tokens=200)
    logic = ThinkingBudget(markers)
    logic.begin(seq, prompt_opens_reasoning=False)
    return seq, logic


def test_the_budget_ends_analysis_and_opens_final_token_by_token() -> None:
    seq, logic = harmony_budget(budget=3)
    thinking = encode("<|channel|>analysis<|message|>") + encode("one two three four five")[:5]
    answer = encode("It is 4.")
    # Zeros: steps whose token is forced anyway.
    forced = encode("<|end|><|start|>assistant<|channel|>final<|message|>")
    events = feed(logic, seq, thinking[:6] + [0] * len(forced) + answer)
    tokens = [token for token, _ in events]
    assert tokens == thinking[:6] + forced + answer
    assert [event for _, event in events if event] == [ThinkEvent.OPENED,
                                                       ThinkEvent.CLOSED_BY_BUDGET]
    assert logic.reasoning_tokens(seq) == 3
    parsed = harmony_encoding().parse_messages_from_completion_tokens(tokens, oh.Role.ASSISTANT)
    assert [(m.channel, m.content[0].text) for m in parsed] == [
        ("analysis", harmony_encoding().decode_utf8(thinking[3:6])), ("final", "It is 4.")]


def test_the_forced_header_holds_the_answer_open_until_it_begins() -> None:
    seq, logic = harmony_budget(budget=1)
    held = []
    steps = encode("<|channel|>analysis<|message|>") + [7] + [0] * len(encode(
        ANALYSIS_END + FINAL_OPENING)) + [40, 41]
    for token_id in steps:
        forced = logic.forced_token(seq)
        held.append(holds_answer_open(seq, forced))
        token_id = forced if forced is not None else token_id
        seq.append_token(token_id)
        logic.observe(seq, token_id)
    # Free steps in the block and the answer's first token are held; forced ones are not.
    assert held == [False, False, False, True] + [False] * 6 + [True, False]


def test_the_models_own_end_closes_the_block_and_forces_nothing() -> None:
    seq, logic = harmony_budget(budget=10)
    call = encode("<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
                  '<|message|>{"a": 1}')
    steps = encode("<|channel|>analysis<|message|>Need f.<|end|>") + call
    events = feed(logic, seq, steps)
    assert [token for token, _ in events] == steps
    assert [event for _, event in events if event] == [ThinkEvent.OPENED,
                                                       ThinkEvent.CLOSED_BY_MODEL]
    assert logic.reasoning_tokens(seq) == len(encode("Need f."))


def test_harmony_turns_end_at_return_and_call_not_at_end() -> None:
    """`<|end|>` ends the analysis message, not the turn: with gpt-oss's real template the
    stop ids are `<|return|>` and `<|call|>` (other templates keep their turn-end marker)."""
    from tokenizers import Tokenizer, models

    from tests.llama_cpp_source import llama_cpp_tree
    from workers.model.tokenizer import chat_eos_token_ids

    backend = Tokenizer(models.WordLevel({"x": 0}, unk_token="x"))
    backend.add_special_tokens(["<|return|>", "<|end|>", "<|call|>", "<|im_end|>"])
    template = (llama_cpp_tree() / "models" / "templates" / "openai-gpt-oss-120b.jinja").read_text()
    assert chat_eos_token_ids(backend, [1], template) == [1, 3]
    assert chat_eos_token_ids(backend, [1], "{{ '<|end|>' }}") == [1, 2]
