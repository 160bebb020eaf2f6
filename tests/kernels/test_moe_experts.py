"""moe_experts: the reference against each token's experts computed one by one in float64,
the Triton grouped GEMM against the reference, and the pairs' grouping by expert."""

import pytest
import torch

import kernels
from kernels.moe_experts import align_pairs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def layer(tokens: int, experts: int, top_k: int, hidden: int, width: int, seed: int = 0,
          dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    hidden_states = torch.randn(tokens, hidden, generator=generator)
    gate_up = torch.randn(experts, 2 * width, hidden, generator=generator) / hidden**0.5
    down = torch.randn(experts, hidden, width, generator=generator) / width**0.5
    scores = torch.randn(tokens, experts, generator=generator).softmax(-1)
    weights, expert_ids = scores.topk(top_k, dim=-1)
    return tuple(t.to(DEVICE) for t in (
        hidden_states.to(dtype), gate_up.to(dtype), down.to(dtype), expert_ids,
        weights.to(dtype)))


def one_by_one(hidden, gate_up, down, expert_ids, weights) -> torch.Tensor:
    """Each token through each of its experts' SwiGLU MLPs, weighted and summed."""
    width = down.shape[2]
    out = torch.zeros(hidden.shape, dtype=torch.float64)
    for token in range(hidden.shape[0]):
        x = hidden[token].double()
        for slot in range(expert_ids.shape[1]):
            expert = int(expert_ids[token, slot])
            projected = gate_up[expert].double() @ x
            gate, up = projected[:width], projected[width:]
            activated = gate / (1 + torch.exp(-gate)) * up
            out[token] += weights[token, slot].double() * (down[expert].double() @ activated)
    return out


@pytest.mark.parametrize("tokens", [1, 5, 33])
def test_reference_matches_each_token_one_by_one(tokens, assert_close):
    args = layer(tokens, experts=6, top_k=2, hidden=64, width=48, seed=tokens)
    assert_close(kernels.moe_experts_ref(*args), one_by_one(*args), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens,experts,top_k", [(1, 4, 2), (7, 8, 2), (40, 4, 3)])
def test_triton_matches_reference(tokens, experts, top_k, dtype, triton_ops, assert_close):
    # 40 tokens over 4 experts: runs longer than a block of pairs, and padded blocks.
    args = layer(tokens, experts, top_k, hidden=96, width=80, seed=experts, dtype=dtype)
    assert_close(triton_ops.moe_experts(*args), kernels.moe_experts_ref(*args), dtype)


def test_an_expert_no_token_chose_costs_nothing_and_changes_nothing(triton_ops, assert_close):
    hidden, gate_up, down, _, weights = layer(6, experts=5, top_k=2, hidden=64, width=32)
    expert_ids = torch.tensor([[0, 3]] * 6, device=DEVICE)
    expected = kernels.moe_experts_ref(hidden, gate_up, down, expert_ids, weights)
    poisoned = gate_up.clone()
    poisoned[[1, 2, 4]] = float("nan")  # read by no pair
    assert_close(triton_ops.moe_experts(hidden, poisoned, down, expert_ids, weights), expected)
    assert_close(kernels.moe_experts_ref(hidden, poisoned, down, expert_ids, weights), expected)


def test_zero_tokens(triton_ops):
    hidden, gate_up, down, expert_ids, weights = layer(3, experts=4, top_k=2, hidden=32, width=16)
    for op in (triton_ops.moe_experts, kernels.moe_experts_ref):
        out = op(hidden[:0], gate_up, down, expert_ids[:0], weights[:0])
        assert out.shape == (0, 32)


def test_pairs_are_grouped_by_expert_in_padded_blocks():
    expert_ids = torch.tensor([[2, 0], [2, 1], [0, 2]])
    pair_ids, block_experts = align_pairs(expert_ids, num_experts=4, block_m=4)
    pairs = expert_ids.numel()
    blocks = pair_ids.view(-1, 4)
    used = [int(expert) for expert in block_experts if expert >= 0]
    assert used == [0, 1, 2]  # expert 3 has no pairs and no block
    for block, expert in zip(blocks, used, strict=False):
        real = [int(pair) for pair in block if pair < pairs]
        assert real and all(int(expert_ids.view(-1)[pair]) == expert for pair in real)
    # Every pair once; the rest is padding.
    real = sorted(int(pair) for pair in pair_ids if pair < pairs)
    assert real == list(range(pairs))
    assert all(int(expert) == -1 for expert in block_experts[len(used):])


def test_launcher_rejects_bad_inputs():
    hidden, gate_up, down, expert_ids, weights = layer(3, experts=4, top_k=2, hidden=32, width=16)
    with pytest.raises(ValueError, match="down"):
        kernels.moe_experts_ref(hidden, gate_up, down[:, :, :8], expert_ids, weights)
    with pytest.raises(ValueError, match="expert_weights"):
        kernels.moe_experts_ref(hidden, gate_up, down, expert_ids, weights[:, :1])
    with pytest.raises(ValueError, match="rows"):
        kernels.moe_experts_ref(hidden[:2], gate_up, down, expert_ids, weights)
