"""Quantized linears: GGUF blocks decode exactly, the fused op and torch's int4/int8
kernels meet the dequantized weight, a row's bits never depend on its batch (nor, on the
fused op, on the thread count), and the default model computing with its own Q4_1/Q8_0
weights keeps its logits near the float32 reference."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from kernels import cpu_ops
from workers.model import DEFAULT_MODEL, load_model
from workers.model.gguf_loader import read_gguf
from workers.model.group_quantized import GroupQuantized, decode_blocks
from workers.model.loader import resolve_weights, served_model_path
from workers.model.quantized_linear import (
    GroupLinear,
    Int4Linear,
    Int8Linear,
    quantized_linear,
    quantized_matmuls_available,
)

from .paged_runner import PagedRunner

pytestmark = pytest.mark.skipif(
    not quantized_matmuls_available(torch.device("cpu")), reason="no weight-only CPU matmuls"
)
FIXTURE = Path(__file__).parent / "fixtures" / "smollm2_logits.npz"
needs_fused_ops = pytest.mark.skipif(not cpu_ops.available(), reason="no fused CPU ops")
# Against transformers in float32 on the dequantized weights (the logit fixture), over
# logits that span about 35. The fused op computes with exactly the dequantized weights
# in float32, so only the order of sums differs (measured 4e-5, mean 7e-6); torch's
# kernels compute in bf16 and requantize the Q8_0 output projection to one scale a row
# (measured 0.71, mean 0.09). A bfloat16 model rounds everything else too (0.63 / 0.24
# on the fused op, 0.78 / 0.11 on torch's).
EXACT_MAX_LOGIT_DIFFERENCE = 1e-3
EXACT_MEAN_LOGIT_DIFFERENCE = 1e-4
MAX_LOGIT_DIFFERENCE = 1.0
MEAN_LOGIT_DIFFERENCE = 0.15
BF16_MEAN_LOGIT_DIFFERENCE = 0.3
# Reference logits closer than this to the top one count as a tie for the greedy choice.
NEAR_TIE = 0.25


def random_q4_1(rows: int, columns: int, seed: int) -> GroupQuantized:
    generator = torch.Generator().manual_seed(seed)
    groups = columns // 32
    return GroupQuantized(
        "Q4_1",
        torch.randint(0, 16, (rows, columns), generator=generator, dtype=torch.int8),
        torch.rand(rows, groups, generator=generator) * 0.02,
        (torch.rand(rows, groups, generator=generator) - 0.5) * 0.2,
    )


def random_without_mins(
    kind: str, codes: tuple[int, int], scale: float, rows: int, columns: int, seed: int
) -> GroupQuantized:
    """A Q4_0 or Q8_0 weight: codes in [low, high), a scale per 32 columns, no min."""
    generator = torch.Generator().manual_seed(seed)
    return GroupQuantized(
        kind,
        torch.randint(*codes, (rows, columns), generator=generator, dtype=torch.int8),
        torch.rand(rows, columns // 32, generator=generator) * scale,
        None,
    )


def random_q4_0(rows: int, columns: int, seed: int) -> GroupQuantized:
    return random_without_mins("Q4_0", (-8, 8), 0.02, rows, columns, seed)


def random_q8_0(rows: int, columns: int, seed: int) -> GroupQuantized:
    return random_without_mins("Q8_0", (-128, 128), 0.002, rows, columns, seed)


def as_gguf_stores_it(weight: GroupQuantized) -> GroupQuantized:
    """The same weight with float16 scales and mins, as a GGUF file holds them."""
    return GroupQuantized(
        weight.kind,
        weight.codes,
        weight.scales.half().float(),
        None if weight.mins is None else weight.mins.half().float(),
    )


def test_gguf_blocks_decode_to_what_gguf_dequantizes() -> None:
    reader = gguf.GGUFReader(served_model_path(DEFAULT_MODEL))
    seen = set()
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        if kind in seen or kind not in ("Q4_1", "Q8_0"):
            continue
        seen.add(kind)
        columns, rows = (int(size) for size in tensor.shape)
        decoded = decode_blocks(kind, tensor.data, rows, columns).dequantize()
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        assert torch.equal(decoded, torch.from_numpy(expected)), tensor.name
    assert seen == {"Q4_1", "Q8_0"}


def test_read_quantized_names_every_linear_of_the_default_model() -> None:
    checkpoint = read_gguf(served_model_path(DEFAULT_MODEL))
    assert checkpoint.read_quantized is not None
    names = {name for name, _ in checkpoint.read_quantized()}
    assert "model.embed_tokens.weight" in names
    assert "model.layers.29.self_attn.k_proj.weight" in names
    assert len(names) == 1 + 7 * checkpoint.config.num_layers


@pytest.mark.parametrize(("rows", "columns"), [(960, 576), (576, 1536)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_int4_linear_meets_the_dequantized_weight(rows: int, columns: int, dtype) -> None:
    weight = random_q4_1(rows, columns, seed=rows)
    linear = Int4Linear(weight, None, dtype)
    x = torch.randn(5, columns).to(dtype)
    expected = x.float() @ weight.dequantize().T
    worst = (linear(x).float() - expected).abs().max().item()
    scale = expected.abs().max().item()
    print(f"int4 {dtype} worst mismatch {worst:.3g} of outputs up to {scale:.3g}")
    assert worst < scale * (0.02 if dtype == torch.bfloat16 else 1e-4)


def test_int8_linear_meets_the_dequantized_weight() -> None:
    weight = random_q8_0(1024, 576, seed=0)
    linear = Int8Linear(weight, None, torch.bfloat16)
    x = torch.randn(5, 576).bfloat16()
    expected = x.float() @ weight.dequantize().T
    worst = (linear(x).float() - expected).abs().max().item()
    scale = expected.abs().max().item()
    print(f"int8 worst mismatch {worst:.3g} of outputs up to {scale:.3g}")
    assert worst < scale * 0.03


@pytest.mark.parametrize("kind", ["int4", "int8"])
def test_a_row_gives_the_same_bits_alone_and_in_any_batch(kind: str) -> None:
    """What a sequence generates must not depend on what else is in its batch."""
    if kind == "int4":
        linear: torch.nn.Module = Int4Linear(random_q4_1(3072, 576, seed=1), None, torch.bfloat16)
    else:
        linear = Int8Linear(random_q8_0(4096, 576, seed=1), None, torch.bfloat16)
    x = torch.randn(70, 576).bfloat16()
    batch = linear(x)
    for rows in (1, 2, 3, 8, 15, 16, 17, 33, 64):
        assert torch.equal(linear(x[:rows]), batch[:rows]), rows


def logit_differences(model) -> tuple[float, float]:
    """The worst and the largest per-prompt mean absolute logit difference from the
    float32 reference, checking that each greedy choice is the reference's."""
    with np.load(FIXTURE) as data:
        fixture = {name: data[name] for name in data.files}
    worst = mean = 0.0
    for row, length in enumerate(fixture["lengths"]):
        ids = fixture["token_ids"][row, :length].tolist()
        logits = PagedRunner(model, 16, 8).step({"p": ids}, is_prefill=True)["p"]
        expected = torch.from_numpy(fixture["logits"][row])
        difference = (logits - expected).abs()
        worst, mean = max(worst, difference.max().item()), max(mean, difference.mean().item())
        # The greedy choice must be the reference's, except between tokens the reference
        # itself nearly ties (prompt 0's top two are 0.08 apart): rounding the same math
        # differently may order those either way.
        chosen = int(logits.argmax())
        assert expected[chosen] >= expected.max() - NEAR_TIE, f"prompt {row}"
    return worst, mean


def test_quantized_model_logits_stay_near_the_float32_reference() -> None:
    """As a CPU worker serves `--weights quantized`: float32 between the matmuls."""
    model = load_model(DEFAULT_MODEL, dtype=torch.float32, weights="quantized")
    assert model.weights == "quantized"
    worst, mean = logit_differences(model.model)
    print(f"quantized: max abs logit difference {worst:.3g}, mean {mean:.3g}")
    if cpu_ops.available():
        assert worst < EXACT_MAX_LOGIT_DIFFERENCE
        assert mean < EXACT_MEAN_LOGIT_DIFFERENCE
    else:
        assert worst < MAX_LOGIT_DIFFERENCE
        assert mean < MEAN_LOGIT_DIFFERENCE


def test_a_bfloat16_model_on_quantized_weights_stays_near_the_reference() -> None:
    model = load_model(DEFAULT_MODEL, dtype=torch.bfloat16, weights="quantized")
    worst, mean = logit_differences(model.model)
    print(f"bf16, quantized: max abs logit difference {worst:.3g}, mean {mean:.3g}")
    assert worst < MAX_LOGIT_DIFFERENCE
    assert mean < BF16_MEAN_LOGIT_DIFFERENCE


def test_auto_is_quantized_on_the_fused_ops_and_bf16_elsewhere() -> None:
    """`auto` takes the file's quantized weights where the fused op computes them (exact,
    resume-safe, fastest at few sequences), bf16 where torch's kernels would."""
    checkpoint = read_gguf(served_model_path(DEFAULT_MODEL))
    cpu = torch.device("cpu")
    assert resolve_weights("auto", checkpoint, cpu, fused=True) == "quantized"
    assert resolve_weights("auto", checkpoint, cpu, fused=False) == "bf16"
    assert resolve_weights("quantized", checkpoint, cpu) == "quantized"
    assert resolve_weights("bf16", checkpoint, cpu, fused=True) == "bf16"
    with pytest.raises(ValueError, match="weights must be one of"):
        resolve_weights("int4", checkpoint, cpu)


@needs_fused_ops
def test_the_quantized_linears_follow_the_model_kernels() -> None:
    fused = load_model(DEFAULT_MODEL, backend="cpu", weights="auto")
    assert fused.weights == "quantized"
    assert isinstance(fused.model.layers[0].mlp.down_proj, GroupLinear)
    reference = load_model(DEFAULT_MODEL, backend="torch", weights="quantized")
    assert isinstance(reference.model.layers[0].mlp.down_proj, Int4Linear)
    assert load_model(DEFAULT_MODEL, backend="torch", weights="auto").weights == "bf16"


def test_quantized_weights_need_a_quantized_file(tiny_llama) -> None:
    with pytest.raises(ValueError, match="quantized GGUF"):
        load_model(tiny_llama.directory, weights="quantized")
    assert load_model(tiny_llama.directory, weights="auto").weights == "bf16"


@pytest.mark.parametrize("kind", ["int4", "int8"])
def test_a_float32_model_gets_float32_from_the_bf16_kernels(kind: str) -> None:
    """A float32 model (a CPU without native bf16) computes its quantized linears in
    bfloat16, their fast path, and gets its own dtype back."""
    if kind == "int4":
        linear: torch.nn.Module = Int4Linear(random_q4_1(960, 576, seed=2), None, torch.bfloat16)
    else:
        linear = Int8Linear(random_q8_0(960, 576, seed=2), None, torch.bfloat16)
    x = torch.randn(3, 576)
    out = linear(x)
    assert out.dtype == torch.float32
    assert torch.equal(out, linear(x.bfloat16()).float())


RANDOM_WEIGHTS = {"Q4_0": random_q4_0, "Q4_1": random_q4_1, "Q8_0": random_q8_0}


@needs_fused_ops
def test_the_fused_ops_are_what_quantized_linear_builds() -> None:
    assert isinstance(quantized_linear(random_q4_1(64, 64, seed=0), None), GroupLinear)


@needs_fused_ops
@pytest.mark.parametrize("kind", sorted(RANDOM_WEIGHTS))
@pytest.mark.parametrize("gguf_scales", [True, False])
def test_group_linear_meets_the_dequantized_weight(kind: str, gguf_scales: bool) -> None:
    """Exactly the dequantized weights in float32: only the order of the sum differs."""
    weight = RANDOM_WEIGHTS[kind](960, 576, seed=3)
    if gguf_scales:
        weight = as_gguf_stores_it(weight)
    bias = torch.randn(960)
    linear = GroupLinear(weight, bias)
    x = torch.randn(2, 5, 576)
    expected = (x.double() @ weight.dequantize().double().T + bias.double()).float()
    out = linear(x)
    assert out.shape == (2, 5, 960) and out.dtype == torch.float32
    worst = (out - expected).abs().max().item()
    scale = expected.abs().max().item()
    print(f"{kind} worst mismatch {worst:.3g} of outputs up to {scale:.3g}")
    assert worst < scale * 1e-5
    assert linear(x.bfloat16()).dtype == torch.bfloat16
    assert torch.equal(linear(x.bfloat16()), linear(x.bfloat16().float()).bfloat16())


@needs_fused_ops
@pytest.mark.parametrize("kind", sorted(RANDOM_WEIGHTS))
def test_group_linear_gives_a_row_the_same_bits_in_any_batch_and_thread_count(kind: str) -> None:
    linear = GroupLinear(as_gguf_stores_it(RANDOM_WEIGHTS[kind](1000, 576, seed=4)), None)
    x = torch.randn(70, 576)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        batch = linear(x)
        torch.set_num_threads(2)
        assert torch.equal(linear(x), batch)
    finally:
        torch.set_num_threads(threads)
    # Every tile shape the op uses: 8, 4, 2 and 1 rows, with any remainder.
    for rows in (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 64):
        assert torch.equal(linear(x[:rows]), batch[:rows]), rows
    assert torch.equal(linear(x[41:42]), batch[41:42])


@needs_fused_ops
def test_the_fused_op_refuses_what_it_cannot_compute() -> None:
    op = cpu_ops.quantized_linear
    codes = torch.zeros(4, 32, dtype=torch.uint8)
    scales = torch.ones(4, 2)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        op(torch.randn(1, 40), torch.zeros(4, 20, dtype=torch.uint8), scales, None, 4, 0)
    with pytest.raises(RuntimeError, match="bytes per row"):
        op(torch.randn(1, 64), codes, scales, None, 8, 0)
    with pytest.raises(RuntimeError, match="float32"):
        op(torch.randn(1, 64).double(), codes, scales, None, 4, 0)
    with pytest.raises(RuntimeError, match="bits must be 4 or 8"):
        op(torch.randn(1, 64), codes, scales, None, 3, 0)
    with pytest.raises(RuntimeError, match="scales must be float32"):
        op(torch.randn(1, 64), codes, scales.half(), None, 4, 0)
    with pytest.raises(RuntimeError, match="mins must"):
        op(torch.randn(1, 64), codes, scales, torch.ones(4, 3), 4, 0)
