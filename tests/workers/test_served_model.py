"""The worker's model settings (the dtype it loads the model in), and the shape every served
model must have."""

import pytest
import torch
from pydantic import ValidationError

from workers.served_model import load_engine_model
from workers.settings import WorkerSettings


def test_dtype_setting_loads_the_model_and_its_cache_in_that_dtype():
    served = load_engine_model(WorkerSettings(dtype="bfloat16", num_kv_blocks=8))
    runner = served.engine.model_runner
    assert runner.dtype == torch.bfloat16
    assert runner.kv_caches[0][0].dtype == torch.bfloat16


def test_auto_dtype_keeps_float32_between_the_matmuls_on_a_cpu():
    """On a GPU everything is bf16; on a CPU activations and the KV cache stay float32,
    the linears compute with the GGUF file's own groups where the fused CPU ops run, and
    dense linears (`--weights bf16`) compute in bf16 only where the CPU has native bf16."""
    from kernels import cpu_ops
    from workers.model.cpu_linear import PrepackedLinear
    from workers.model.quantized_linear import GroupLinear

    served = load_engine_model(WorkerSettings(num_kv_blocks=8))
    runner = served.engine.model_runner
    if torch.cuda.is_available():
        assert runner.dtype == torch.bfloat16
        return
    assert runner.dtype == torch.float32
    assert runner.kv_caches[0][0].dtype == torch.float32
    default_linear = runner.model.layers[0].mlp.down_proj
    assert isinstance(default_linear, GroupLinear if cpu_ops.available() else PrepackedLinear)

    dense = load_engine_model(WorkerSettings(num_kv_blocks=8, weights="bf16"))
    native_bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    linear = dense.engine.model_runner.model.layers[0].mlp.down_proj
    assert isinstance(linear, PrepackedLinear)
    assert linear.dtype == (torch.bfloat16 if native_bf16 else torch.float32)


def test_unknown_dtype_is_refused_naming_the_setting(monkeypatch):
    monkeypatch.setenv("SPATE_DTYPE", "int8")
    with pytest.raises(ValidationError, match="dtype"):
        WorkerSettings()


def test_num_threads_setting_sets_the_compute_threads():
    before = torch.get_num_threads()
    try:
        load_engine_model(WorkerSettings(num_threads=1, num_kv_blocks=8))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_served_model_missing_a_member_is_refused_by_name():
    from benchmarks.synthetic_engine import SyntheticServedModel
    from workers.served_model import check_served_model

    class Partial:
        card = engine = None

        def build_prompt(self, request): ...

        def sampling_params(self, request): ...

    with pytest.raises(TypeError, match="token_text, decode"):
        check_served_model(Partial())
    check_served_model(SyntheticServedModel(0.0, "bench"))


def test_the_kernels_setting_also_picks_the_quantized_linears():
    """`--kernels torch` serves torch's ops throughout: its quantized linears too, and
    `auto` weights stay dense there."""
    from workers.model.quantized_linear import GroupLinear, Int4Linear

    if torch.cuda.is_available():
        pytest.skip("the CPU path's setting")
    reference = load_engine_model(WorkerSettings(num_kv_blocks=8, kernels="torch"))
    assert reference.loaded.weights == "bf16"
    quantized = load_engine_model(
        WorkerSettings(num_kv_blocks=8, kernels="torch", weights="quantized")
    )
    down_proj = quantized.engine.model_runner.model.layers[0].mlp.down_proj
    assert isinstance(down_proj, Int4Linear) and not isinstance(down_proj, GroupLinear)
