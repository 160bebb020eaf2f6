"""Sampler on synthetic logits with the torch ops: greedy, truncation, forcing, seeds, logprobs."""

from __future__ import annotations

import math

import pytest
import torch

import kernels
from events.request_settings import MAX_TOP_K
from workers.engine.sampler import Sampler
from workers.engine.sampling_params import SamplingParams
from workers.engine.sequence import Sequence

VOCAB_SIZE = 64


def make_sampler() -> Sampler:
    return Sampler(kernels.get_ops("torch"), VOCAB_SIZE, torch.device("cpu"))


def make_sequence(params: SamplingParams, output_token_ids=(), prompt=(1, 2, 3)) -> Sequence:
    return Sequence(
        "r", 0, list(prompt), params, max_num_tokens=1000, output_token_ids=output_token_ids
    )


def random_logits(batch: int, seed: int = 0) -> torch.Tensor:
    return torch.randn((batch, VOCAB_SIZE), generator=torch.Generator().manual_seed(seed)) * 3


def test_greedy_and_top_k_one_pick_the_argmax():
    logits = random_logits(3)
    seqs = [
        make_sequence(SamplingParams.of(temperature=0.0)),
        make_sequence(SamplingParams.of(temperature=1.5, top_k=1)),
        make_sequence(SamplingParams.of(temperature=0.7, top_p=1e-6)),
    ]
    expected = logits.argmax(dim=-1).tolist()
    assert make_sampler()(logits.clone(), seqs, [None] * 3).token_ids == expected


def test_min_p_one_keeps_only_the_most_likely_token():
    logits = random_logits(2, seed=3)
    seqs = [make_sequence(SamplingParams.of(temperature=2.0, min_p=1.0)) for _ in range(2)]
    assert (
        make_sampler()(logits.clone(), seqs, [None, None]).token_ids
        == logits.argmax(dim=-1).tolist()
    )


def test_sampling_follows_the_distribution():
    logits = torch.tensor(
        [[math.log(0.7), math.log(0.2), math.log(0.1)] + [-math.inf] * (VOCAB_SIZE - 3)]
    )
    sampler = make_sampler()
    counts = [0, 0, 0]
    for _ in range(2000):
        token_id = sampler(logits.clone(), [make_sequence(SamplingParams())], [None]).token_ids[0]
        counts[token_id] += 1
    assert counts[0] / 2000 == pytest.approx(0.7, abs=0.04)
    assert counts[1] / 2000 == pytest.approx(0.2, abs=0.04)
    # top_p=0.8 keeps the two tokens whose mass reaches 0.8 and never the third.
    top_p_counts = [0, 0, 0]
    for _ in range(500):
        params = SamplingParams.of(top_p=0.8)
        top_p_counts[sampler(logits.clone(), [make_sequence(params)], [None]).token_ids[0]] += 1
    assert top_p_counts[2] == 0 and top_p_counts[1] > 0


def test_forced_token_wins_over_bias_penalties_and_temperature():
    logits = random_logits(2, seed=1)
    forced_token = int(logits[0].argmin())
    params = SamplingParams.of(
        temperature=0.0,
        logit_bias={forced_token: -100.0},
        repetition_penalty=1.8,
        frequency_penalty=2.0,
        presence_penalty=2.0,
    )
    seqs = [
        make_sequence(params, output_token_ids=[forced_token] * 5),
        make_sequence(SamplingParams.of(temperature=0.0)),
    ]
    sampled = make_sampler()(logits.clone(), seqs, [forced_token, None])
    assert sampled.token_ids == [forced_token, int(logits[1].argmax())]


def test_logit_bias_and_penalties_steer_greedy_choice():
    logits = torch.zeros((1, VOCAB_SIZE))
    logits[0, 5] = 1.0
    biased = make_sequence(SamplingParams.of(temperature=0.0, logit_bias={9: 5.0}))
    assert make_sampler()(logits.clone(), [biased], [None]).token_ids == [9]
    penalized = make_sequence(
        SamplingParams.of(temperature=0.0, presence_penalty=2.0), output_token_ids=[5]
    )
    assert make_sampler()(logits.clone(), [penalized], [None]).token_ids != [5]


def test_seeded_rows_do_not_depend_on_the_rest_of_the_batch():
    logits = random_logits(1, seed=7)
    params = SamplingParams.of(temperature=1.0, seed=42)

    def draws(batch_logits, row):
        seq = make_sequence(params)
        others = [
            make_sequence(SamplingParams.of(temperature=1.0)) for _ in range(batch_logits.shape[0] - 1)
        ]
        seqs = others[:row] + [seq] + others[row:]
        sampler = make_sampler()
        return [
            sampler(batch_logits.clone(), seqs, [None] * len(seqs)).token_ids[row]
            for _ in range(20)
        ]

    alone = draws(logits, 0)
    crowded = torch.cat([random_logits(2, seed=8), logits, random_logits(3, seed=9)])
    assert draws(crowded, 2) == alone
    assert len(set(alone)) > 1  # it does sample


def test_replayed_draws_continue_the_seeded_stream():
    logits = random_logits(1, seed=11)
    params = SamplingParams.of(temperature=1.0, seed=5)
    sampler = make_sampler()
    uninterrupted = make_sequence(params)
    stream = [sampler(logits.clone(), [uninterrupted], [None]).token_ids[0] for _ in range(10)]
    resumed = make_sequence(params)
    resumed.draws.num_to_replay = 6
    assert [sampler(logits.clone(), [resumed], [None]).token_ids[0] for _ in range(4)] == stream[6:]


def test_logprobs_come_from_the_processed_logits_before_temperature():
    logits = random_logits(2, seed=4)
    seqs = [
        make_sequence(SamplingParams.of(temperature=0.0, top_logprobs=2)),
        make_sequence(SamplingParams.of(temperature=2.0, top_logprobs=0)),
    ]
    sampled = make_sampler()(logits.clone(), seqs, [None, None])
    expected = logits.log_softmax(dim=-1)
    greedy_entry, sampled_entry = sampled.logprobs
    assert greedy_entry.token_id == sampled.token_ids[0]
    assert greedy_entry.logprob == pytest.approx(float(expected[0].max()), abs=1e-5)
    top_values, top_ids = expected[0].topk(2)
    assert [token_id for token_id, _ in greedy_entry.top_logprobs] == top_ids.tolist()
    assert sampled_entry.top_logprobs == []
    assert sampled_entry.logprob == pytest.approx(
        float(expected[1, sampled.token_ids[1]]), abs=1e-5
    )
    forced = make_sampler()(logits.clone(), [seqs[0]], [17]).logprobs[0]
    assert forced.token_id == 17 and forced.logprob == 0.0
    assert forced.top_logprobs[1][1] == -9999.0


def test_the_largest_top_k_a_request_may_send_keeps_the_batch_running():
    """top_k is capped by the request event (MAX_TOP_K), far above any vocabulary; at the
    cap it keeps every token and the rest of the batch samples as it would alone."""
    logits = random_logits(2, seed=5)
    seqs = [
        make_sequence(SamplingParams.of(temperature=0.0)),
        make_sequence(SamplingParams.of(temperature=0.8, top_k=MAX_TOP_K, top_p=0.9, seed=1)),
    ]
    alone = make_sampler()(logits[1:].clone(), [make_sequence(
        SamplingParams.of(temperature=0.8, top_p=0.9, seed=1))], [None]).token_ids
    token_ids = make_sampler()(logits.clone(), seqs, [None, None]).token_ids
    assert token_ids == [int(logits[0].argmax()), *alone]
