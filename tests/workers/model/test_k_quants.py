"""K-quants at their size: the fused op computes Q4_K, Q5_K and Q6_K super-blocks as the
file stores them, to exactly gguf-py's dequantized weights, with a row's bits its own in
any batch, on any thread count and for any vector ISA; a Q4_K_M-style file keeps its
quantized weights at the file's size and its logits at the dequantized dense path's."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from harness.tiny_checkpoint import write_tiny_checkpoint
from kernels import cpu_ops
from tests.kernels.test_cpu_ops import ISA_CHECK_SOURCES, PROBES, _other_isa
from tests.workers.model.k_quant_writer import quantize_q4_k, quantize_q6_k
from tests.workers.model.paged_runner import PagedRunner
from tests.workers.model.test_fused_layers import run_steps
from tests.workers.model.test_gguf_loader import _write_gguf
from workers.model import load_model
from workers.model.fused_layers import FusedLayers
from workers.model.group_quantized import concat_rows
from workers.model.k_quants import BLOCK_BYTES, K_QUANT_TYPES, KQuantized
from workers.model.quantized_linear import GroupLinear, Int8Linear, quantized_linear
from workers.model.row_stack import RowStack, StackedLinear

pytestmark = pytest.mark.skipif(not cpu_ops.available(), reason="no fused CPU ops")
# The dense path sums the same float32 weights in oneDNN's order: only rounding differs
# (measured below 1e-5 over logits spanning about 10).
LOGIT_TOLERANCE = 1e-3


def random_k_quant(kind: str, rows: int, columns: int, seed: int) -> KQuantized:
    """Every code and scale bit pattern at random; d and dmin small, finite fp16."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (rows, columns // 256, BLOCK_BYTES[kind]), dtype=np.uint8)
    for start in (208,) if kind == "Q6_K" else (0, 2):
        d = rng.uniform(1e-4, 1e-2, (rows, columns // 256)).astype(np.float16)
        blocks[..., start : start + 2] = d[..., None].view(np.uint8)
    return KQuantized(kind, torch.from_numpy(blocks.reshape(rows, -1)), columns)


def op(x: torch.Tensor, weight: KQuantized) -> torch.Tensor:
    no_scales = torch.empty(weight.shape[0], 0)
    return cpu_ops.quantized_linear(x, weight.blocks, no_scales, None, weight.bits, weight.offset)


@pytest.mark.parametrize("kind", K_QUANT_TYPES)
def test_each_weight_decodes_to_gguf_py_s_dequantization(kind: str) -> None:
    # One-hot rows read the weights back one at a time: every bit of the decoding shows.
    weight = random_k_quant(kind, 70, 512, seed=1)
    assert torch.equal(op(torch.eye(512), weight).T, weight.dequantize())


@pytest.mark.parametrize("kind", K_QUANT_TYPES)
def test_a_row_meets_the_dequantized_product_and_keeps_its_bits(kind: str) -> None:
    weight = random_k_quant(kind, 67, 768, seed=2)  # 67 rows: a remainder after every tile
    dense = weight.dequantize().double()
    linear = GroupLinear(weight, None)
    x = torch.randn(33, 768, generator=torch.Generator().manual_seed(3))
    batch = linear(x)
    bound = 1e-5 * (x.double().abs() @ dense.abs().T)
    assert ((batch.double() - x.double() @ dense.T).abs() <= bound).all()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(linear(x), batch)
    finally:
        torch.set_num_threads(threads)
    for rows in (1, 2, 3, 4, 5, 8, 9, 17):
        assert torch.equal(linear(x[:rows]), batch[:rows]), rows
    assert torch.equal(linear(x[20:21]), batch[20:21])
    # bf16 activations are computed in float32 and answered in bf16.
    half = x[:5].bfloat16()
    assert torch.equal(linear(half), linear(half.float()).bfloat16())


@pytest.mark.skipif(_other_isa() is None, reason="needs an x86 CPU with AVX2 or AVX-512")
def test_the_k_quants_give_the_same_bits_built_for_another_isa() -> None:
    registration = PROBES / "isa_check.cpp"
    sources = [registration, *(cpu_ops.SOURCE_DIR / name for name in ISA_CHECK_SOURCES)]
    flags = [flag for flag in cpu_ops.CFLAGS if not flag.startswith("-march")]
    cpu_ops.build_library(
        "spate_isa_check", sources, [registration, *cpu_ops.library_files()],
        cflags=[*flags, f"-march={_other_isa()}"],
    )
    other = torch.ops.spate_isa_check
    generator = torch.Generator().manual_seed(4)
    for seed, kind in enumerate(K_QUANT_TYPES):
        weight = random_k_quant(kind, 96, 768, seed=seed)
        for batch in (1, 2, 3, 5, 8, 33):
            x = torch.randn(batch, 768, generator=generator)
            args = (x, weight.blocks, torch.empty(96, 0), None, weight.bits, weight.offset)
            assert torch.equal(op(x, weight), other.quantized_linear(*args)), (kind, batch)


def test_parts_in_different_formats_stack_into_one_projection() -> None:
    q, k, v = (random_k_quant(kind, rows, 256, seed) for seed, (kind, rows) in
               enumerate((("Q4_K", 64), ("Q4_K", 32), ("Q6_K", 32))))
    stacked = concat_rows([q, k, v])
    assert isinstance(stacked, RowStack)
    assert [part.kind for part in stacked.parts] == ["Q4_K", "Q6_K"]  # q and k fused
    assert stacked.shape == (128, 256)
    bias = torch.randn(128)
    linear = quantized_linear(stacked, bias, fused=True)
    assert isinstance(linear, StackedLinear) and linear.out_features == 128
    x = torch.randn(3, 256)
    expected = torch.cat([op(x, q), op(x, k), op(x, v)], dim=1) + bias
    assert torch.equal(linear(x), expected)
    # Without the fused op, torch's int8 kernel takes each part, requantized a row.
    slow = quantized_linear(stacked, bias, fused=False)
    assert all(isinstance(part, Int8Linear) for part in slow.parts)
    reference = x @ stacked.dequantize().T + bias
    assert (slow(x) - reference).abs().max() < 0.05 * reference.abs().max()


def test_the_op_refuses_super_blocks_it_cannot_compute() -> None:
    weight = random_k_quant("Q4_K", 4, 256, seed=5)
    no_scales = torch.empty(4, 0)
    with pytest.raises(RuntimeError, match="multiple of the K-quants' 256"):
        cpu_ops.quantized_linear(torch.randn(1, 288), weight.blocks, no_scales, None, 4, 0)
    with pytest.raises(RuntimeError, match="bytes per row"):
        cpu_ops.quantized_linear(torch.randn(1, 256), weight.blocks, no_scales, None, 5, 0)
    with pytest.raises(RuntimeError, match="bits 4, 5 or 6"):
        cpu_ops.quantized_linear(torch.randn(1, 256), weight.blocks, no_scales, None, 8, 0)
    with pytest.raises(RuntimeError, match="mins must be None"):
        cpu_ops.quantized_linear(torch.randn(1, 256), weight.blocks, no_scales, no_scales, 4, 0)
    with pytest.raises(RuntimeError, match="offset 32"):
        cpu_ops.quantized_linear(torch.randn(1, 256), weight.blocks, no_scales, None, 6, 0)


def _q4_k_m_file(tmp_path, stacked_v: bool):
    """A tiny Llama as llama.cpp's Q4_K_M recipe stores one: Q4_K weights, with the output
    projection and the first layer's ffn_down (and, where `stacked_v`, its attn_v) in Q6_K."""
    hf_dir = tmp_path / "hf"
    config, state = write_tiny_checkpoint(
        hf_dir, "llama", seed=6, hidden_size=256, intermediate_size=512, rope_scaling=None,
        attention_bias=False,
    )
    six_bit = {"output.weight", "blk.0.ffn_down.weight"} | ({"blk.0.attn_v.weight"} if stacked_v else set())

    def encode(name: str, values: np.ndarray):
        if values.ndim != 2:
            return None
        if name in six_bit:
            return quantize_q6_k(values), gguf.GGMLQuantizationType.Q6_K
        return quantize_q4_k(values), gguf.GGMLQuantizationType.Q4_K

    path = tmp_path / ("q4_k_m.gguf" if stacked_v else "q4_k.gguf")
    _write_gguf(path, config, state, hf_dir, encode)
    return path


def test_a_q4_k_m_file_keeps_its_size_and_the_dense_logits(tmp_path) -> None:
    path = _q4_k_m_file(tmp_path, stacked_v=True)
    quantized = load_model(path, weights="quantized")
    dense = load_model(path, weights="bf16")
    assert quantized.quantizations == ("Q4_K", "Q6_K")
    reader = gguf.GGUFReader(path)
    file_bytes = sum(
        int(tensor.n_bytes) for tensor in reader.tensors
        if tensor.tensor_type.name in K_QUANT_TYPES and tensor.name != "token_embd.weight"
    )
    linears = [module for module in quantized.model.modules() if isinstance(module, GroupLinear)]
    resident = sum(
        buffer.nbytes for linear in linears for buffer in linear.buffers() if buffer is not linear.bias
    )
    # Layer 0: q+k and v stacked, o, gate_up, down; layer 1: qkv, o, gate_up, down; lm_head.
    assert len(linears) == 5 + 4 + 1
    assert resident <= 1.2 * file_bytes, (resident, file_bytes)  # measured: 1.0
    ids = quantized.tokenizer.encode("The capital of France is Paris, and the capital of")
    logits = [
        PagedRunner(loaded.model, block_size=4, num_blocks=16).step({"a": ids}, True)["a"]
        for loaded in (quantized, dense)
    ]
    assert (logits[0] - logits[1]).abs().max().item() < LOGIT_TOLERANCE


def test_the_fused_layers_take_k_quants(tmp_path) -> None:
    loaded = load_model(_q4_k_m_file(tmp_path, stacked_v=False), weights="quantized")
    assert FusedLayers.of(loaded.model) is not None
    fused, modules = run_steps(loaded, fused=True), run_steps(loaded, fused=False)
    for step, (got, expected) in enumerate(zip(fused, modules, strict=True)):
        for name in got:
            assert torch.equal(got[name], expected[name]), (step, name)
