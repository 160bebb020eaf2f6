"""A model whose every attention layer slides: the engine gives back each sequence's blocks
before the window as it decodes (kv_release_window, BlockManager.release_window), and the
tokens and logprobs are those of an engine that keeps every block, bit for bit; a response
resumed on another engine still continues with the uninterrupted run's bits."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.workers.engine.conftest import DEFAULT_MODEL, Generation
from tests.workers.engine.test_exact_resume import logprobs_by_position
from workers.engine import EngineConfig, LLMEngine, SamplingParams
from workers.model.attention import Attention, kv_release_window

WINDOW = 16
BLOCK_SIZE = 4
TOKENS = 20
QUESTION = "Write a long story about a lighthouse keeper and the sea."


@pytest.fixture(scope="module")
def sliding_model():
    """The default model with a window on every layer, run layer by layer through the
    attention ops (the one-call fused stack takes a window from the model's config, and
    this model's config has none)."""
    from workers.model import load_model

    loaded = load_model(DEFAULT_MODEL)
    for module in loaded.model.modules():
        if isinstance(module, Attention):
            module.sliding_window = WINDOW
    loaded.model.fuse_layers = False
    return loaded


def engine_for(loaded, release: bool = True) -> LLMEngine:
    engine = LLMEngine(loaded, EngineConfig(num_kv_blocks=256, block_size=BLOCK_SIZE))
    if not release:
        engine.block_manager.release_window = None  # the same model, every block kept
    return engine


@dataclass
class Run:
    generations: dict[str, Generation]
    # Per request, the most leading blocks it had given back at once.
    given_back: dict[str, int]


def run(engine: LLMEngine, requests: dict, max_steps: int = 500) -> Run:
    """Runs the requests (id -> prompt, params, tokens already emitted) to the end."""
    for request_id, (prompt, params, emitted) in requests.items():
        engine.add_request(request_id, prompt, params, output_token_ids=emitted)
    manager = engine.block_manager
    given_back = dict.fromkeys(requests, 0)
    generations: dict[str, Generation] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            break
        for request_id in given_back:
            given_back[request_id] = max(
                given_back[request_id], manager.num_released.get(request_id, 0)
            )
        for output in engine.step():
            generations.setdefault(output.request_id, Generation()).outputs.append(output)
    assert not engine.has_unfinished_requests()
    # Every block came back exactly once.
    assert manager.num_free_blocks == manager.num_blocks
    assert all(block.ref_count == 0 for block in manager.blocks)
    return Run(generations, given_back)


@pytest.fixture(scope="module")
def requests(render_prompt):
    prompt, _ = render_prompt(QUESTION)
    greedy = SamplingParams.of(temperature=0.0, max_output_tokens=TOKENS, ignore_eos=True,
                               top_logprobs=5)
    seeded = SamplingParams.of(temperature=0.8, seed=3, max_output_tokens=TOKENS,
                               ignore_eos=True, top_logprobs=5)
    return {"greedy": (prompt, greedy, ()), "seeded": (prompt, seeded, ())}


@pytest.fixture(scope="module")
def releasing_run(sliding_model, requests):
    """Two sequences sharing their prompt's blocks, decoded side by side, giving back."""
    engine = engine_for(sliding_model)
    assert engine.block_manager.release_window == WINDOW
    return run(engine, requests)


def test_released_blocks_change_no_bit(sliding_model, requests, releasing_run):
    kept = run(engine_for(sliding_model, release=False), requests)
    prompt = requests["greedy"][0]
    for request_id in requests:
        released = releasing_run.generations[request_id]
        assert len(released.token_ids) == TOKENS
        assert released.token_ids == kept.generations[request_id].token_ids
        assert logprobs_by_position(released) == logprobs_by_position(
            kept.generations[request_id]
        )
        # It gave back the blocks its late steps' windows left behind (a step may keep
        # several drafted tokens, so the last one counted may come early).
        late_context = len(prompt) + TOKENS // 2
        assert releasing_run.given_back[request_id] >= (late_context - WINDOW) // BLOCK_SIZE
        assert kept.given_back[request_id] == 0


def test_only_a_model_whose_every_layer_slides_gives_blocks_back(sliding_model, loaded_model):
    assert kv_release_window(sliding_model.model) == WINDOW
    assert kv_release_window(loaded_model.model) is None
    assert engine_for(loaded_model).block_manager.release_window is None


def test_the_window_is_applied(sliding_model, loaded_model, requests):
    prompt = requests["greedy"][0]
    assert len(prompt) > WINDOW
    first_token = SamplingParams.of(temperature=0.0, max_output_tokens=1, top_logprobs=5)
    windowed = run(engine_for(sliding_model), {"r": (prompt, first_token, ())})
    unwindowed = run(engine_for(loaded_model), {"r": (prompt, first_token, ())})
    assert logprobs_by_position(windowed.generations["r"]) != logprobs_by_position(
        unwindowed.generations["r"]
    )


def test_a_resumed_sliding_response_continues_with_the_same_bits(
    sliding_model, requests, releasing_run
):
    """Prefilled in one piece on a fresh engine (prompt plus the tokens emitted, every
    query within its window), the rest equals the uninterrupted run's, which gave blocks
    back as it went."""
    prompt, params, _ = requests["seeded"]
    whole = releasing_run.generations["seeded"]
    emitted = TOKENS // 2
    resumed = run(
        engine_for(sliding_model), {"seeded": (prompt, params, whole.token_ids[:emitted])}
    ).generations["seeded"]
    assert resumed.token_ids == whole.token_ids[emitted:]
    assert logprobs_by_position(resumed) == logprobs_by_position(whole)[emitted:]
