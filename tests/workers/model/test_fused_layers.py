"""The decoder layers as one fused CPU op give the module path's bits: prefill from
scratch, prefill after cached tokens, and decode steps of several sequences; and the
fused path is taken only where it covers the model."""

from __future__ import annotations

import pytest
import torch

from kernels import cpu_ops, get_ops
from tests.workers.model.paged_runner import PagedRunner
from workers.model import DEFAULT_MODEL, load_model
from workers.model.fused_layers import FusedLayers

pytestmark = pytest.mark.skipif(not cpu_ops.available(), reason="no fused CPU ops")


@pytest.fixture(scope="module")
def quantized():
    return load_model(DEFAULT_MODEL, dtype=torch.float32, weights="quantized")


def run_steps(model, fused: bool) -> list[dict[str, torch.Tensor]]:
    """Two prompts prefilled together, one more after a cached prefix (a query chunk
    attending to cached positions), then decode steps of all three."""
    model.model.fuse_layers = fused
    try:
        runner = PagedRunner(model.model, block_size=16, num_blocks=32)
        tokenizer = model.tokenizer
        first = tokenizer.encode("The lighthouse keeper climbed the stairs at dusk and")
        second = tokenizer.encode("Name three primary colours, then explain why")
        logits = [runner.step({"a": first, "b": second}, is_prefill=True, every_position=True)]
        logits.append(runner.step({"c": first[:7]}, is_prefill=True))
        logits.append(runner.step({"c": first[7:]}, is_prefill=True, every_position=True))
        latest: dict[str, torch.Tensor] = {}
        for _ in range(4):
            for step in logits[-3:] if not latest else logits[-1:]:
                latest.update({name: row.reshape(-1, row.shape[-1])[-1] for name, row in step.items()})
            chosen = {name: [int(row.argmax())] for name, row in sorted(latest.items())}
            logits.append(runner.step(chosen, is_prefill=False))
        return logits
    finally:
        model.model.fuse_layers = True


def test_the_fused_layers_give_the_module_path_bits(quantized) -> None:
    assert FusedLayers.of(quantized.model) is not None
    fused = run_steps(quantized, fused=True)
    modules = run_steps(quantized, fused=False)
    assert len(fused) == len(modules)
    assert sorted(fused[-1]) == ["a", "b", "c"]
    for step, (got, expected) in enumerate(zip(fused, modules, strict=True)):
        assert got.keys() == expected.keys()
        for name in got:
            assert torch.equal(got[name], expected[name]), (step, name)


def test_models_or_ops_the_op_does_not_cover_run_their_modules(smollm2, quantized) -> None:
    # Dense float32 linears.
    assert FusedLayers.of(smollm2.model) is None
    assert smollm2.model._fused_layers() is None
    # The quantized model with another backend's ops.
    model = quantized.model
    assert model._fused_layers() is not None
    ops = model.ops
    try:
        model.ops = get_ops("torch")
        assert model._fused_layers() is None
    finally:
        model.ops = ops
