"""check_model: what a model file is and how spate would serve it, read from its metadata
alone (`spate models check`). No weights are read and no model is built: a GGUF file's
header and vocabulary, a folder's JSON files and safetensors headers. What the loader
would refuse is refused here with the loader's own words (one ValueError line)."""

from __future__ import annotations

import json
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as BackendTokenizer

from workers.model.chat_template import ChatTemplate
from workers.model.config import ModelConfig
from workers.model.families import FAMILIES
from workers.model.gguf_config import ROPE_TENSORS, hf_name, read_gguf_config
from workers.model.gguf_metadata import GgufHeader, read_gguf_header
from workers.model.gguf_tokenizer import build_gguf_tokenizer, read_gguf_vocabulary
from workers.model.gguf_types import describe_quantization, refuse_unloadable_types
from workers.model.hf_config import read_hf_config
from workers.model.hf_files import (
    chat_template,
    read_backend_tokenizer,
    read_config_json,
    read_json,
    token_text,
)
from workers.model.model_profile import ModelProfile, detect_profile
from workers.output.tool_prompt import ToolPrompt

_TOKENIZER_KINDS = {"gpt2": "byte-level BPE", "llama": "SentencePiece",
                    "gemma4": "SentencePiece-style BPE"}
DENSE = "dequantized to dense weights at load"


@dataclass(frozen=True, slots=True)
class ModelReport:
    path: Path
    file_format: str
    family: str
    architecture: str  # as the file names it
    quantization: str
    context_length: int
    tokenizer: str
    template: str
    reasoning: str
    thinking_markers: str
    tool_calls: str
    # (path, how it computes this file's weights), for each kernel path.
    kernel_paths: tuple[tuple[str, str], ...]

    def lines(self) -> list[str]:
        differences = FAMILIES[self.family].differences
        rows = [
            ("file", f"{self.path} ({self.file_format})"),
            ("family", f"{self.family} (architecture {self.architecture}: {differences})"),
            ("quantization", self.quantization),
            ("context length", str(self.context_length)),
            ("tokenizer", self.tokenizer),
            ("template", self.template),
            ("reasoning", self.reasoning),
            ("thinking markers", self.thinking_markers),
            ("tool calls", self.tool_calls),
            ("served", "yes"),
        ]
        width = max(len(label) for label, _ in rows) + 2
        lines = [f"{label + ':':<{width}}{value}" for label, value in rows]
        lines += [f"  {path}: {how}" for path, how in self.kernel_paths]
        return lines


@dataclass(frozen=True, slots=True)
class _Read:
    """What both formats hand over: enough to detect the profile as the loader does."""

    config: ModelConfig
    architecture: str
    backend: BackendTokenizer
    tokenizer: str
    template: str | None
    template_origin: str
    bos_token: str | None
    eos_token: str | None
    generation_config: dict[str, object]


def check_model(path: Path) -> ModelReport:
    """The report, or a ValueError naming what spate cannot serve and what it supports."""
    if path.is_file() and path.suffix == ".gguf":
        header = read_gguf_header(path)
        read = _read_gguf(path, header)
        file_format = f"GGUF v{header.version}, {len(header.tensors)} tensors"
        quantization = describe_quantization(header)
        kernel_paths = _gguf_kernel_paths(header)
    elif path.is_dir():
        read = _read_folder(path)
        dtypes = _safetensors_dtypes(path)
        file_format = "Hugging Face folder"
        quantization = "none (safetensors: " + ", ".join(
            f"{kind} x{n}" for kind, n in dtypes.most_common()) + ")"
        kernel_paths = _folder_kernel_paths()
    else:
        raise ValueError(f"{path} is neither a .gguf file nor a Hugging Face model folder")
    if read.template is None:
        raise ValueError(f"model {path.name!r} has no chat template")
    profile = detect_profile(
        path.stem if path.is_file() else path.name, read.config.max_position_embeddings,
        read.backend.get_vocab(with_added_tokens=True), read.template, read.generation_config,
        bos_token=read.bos_token, eos_token=read.eos_token,
    )
    template = ChatTemplate(
        read.template, read.bos_token, read.eos_token,
        default_kwargs=dict(profile.default_chat_template_kwargs),
        thinking_switch=profile.thinking_switch,
    )
    return ModelReport(
        path=path, file_format=file_format, family=read.config.architecture,
        architecture=read.architecture, quantization=quantization,
        context_length=read.config.max_position_embeddings, tokenizer=read.tokenizer,
        template=f"present ({read.template_origin}, {len(read.template)} characters)",
        reasoning=profile.describe_reasoning(),
        thinking_markers=_markers(profile, read.backend), tool_calls=_tool_calls(template, profile),
        kernel_paths=kernel_paths,
    )


def _read_gguf(path: Path, header: GgufHeader) -> _Read:
    config = read_gguf_config(header)
    refuse_unloadable_types(header)
    for name in header.tensors:  # a tensor the loader would not place is refused as it would
        if name not in ROPE_TENSORS:
            hf_name(name, config.architecture)
    vocabulary = read_gguf_vocabulary(path)
    if not vocabulary.tokens:
        raise ValueError(f"{path} has no tokenizer vocabulary")
    backend = build_gguf_tokenizer(vocabulary)
    if not config.eos_token_ids:
        raise ValueError(f"{path} names no eos token")
    tokens = vocabulary.tokens
    kind = _TOKENIZER_KINDS.get(vocabulary.model, vocabulary.model)
    return _Read(
        config=config, architecture=str(header.get("general.architecture")), backend=backend,
        tokenizer=f"{vocabulary.model} ({kind}), pre-tokenizer {vocabulary.pre}, "
        f"{len(tokens)} tokens",
        template=header.get("tokenizer.chat_template"), template_origin="the GGUF metadata",
        bos_token=None if config.bos_token_id is None else tokens[config.bos_token_id],
        eos_token=tokens[config.eos_token_ids[0]], generation_config={},
    )


def _read_folder(directory: Path) -> _Read:
    raw = read_config_json(directory)
    config = read_hf_config(raw)
    backend = read_backend_tokenizer(directory)
    tokenizer_config = read_json(directory / "tokenizer_config.json")
    template = chat_template(directory, tokenizer_config)
    origin = ("chat_template.jinja" if (directory / "chat_template.jinja").is_file()
              else "tokenizer_config.json")
    model = json.loads(backend.to_str()).get("model", {}).get("type", "?")
    return _Read(
        config=config, architecture=str((raw.get("architectures") or ["?"])[0]), backend=backend,
        tokenizer=f"tokenizer.json ({model}), "
        f"{backend.get_vocab_size(with_added_tokens=True)} tokens",
        template=template, template_origin=origin,
        bos_token=token_text(tokenizer_config.get("bos_token")),
        eos_token=token_text(tokenizer_config.get("eos_token")),
        generation_config=read_json(directory / "generation_config.json"),
    )


def _safetensors_dtypes(directory: Path) -> Counter[str]:
    """Tensors per dtype, from each safetensors file's JSON header (8-byte length first)."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{directory} has no *.safetensors files")
    counts: Counter[str] = Counter()
    for file in files:
        with file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            entries = json.loads(handle.read(length))
        counts.update(entry["dtype"] for name, entry in entries.items() if name != "__metadata__")
    return counts


def _markers(profile: ModelProfile, backend: BackendTokenizer) -> str:
    if profile.reasoning_start is None or profile.reasoning_end is None:
        return "none"

    def spelled(marker: str) -> str:
        ids = backend.encode(marker, add_special_tokens=False).ids
        return f"{marker} = token {ids[0]}" if len(ids) == 1 else f"{marker} = tokens {ids}"

    return f"{spelled(profile.reasoning_start)}, {spelled(profile.reasoning_end)}"


def _tool_calls(template: ChatTemplate, profile: ModelProfile) -> str:
    prompt = ToolPrompt(template, profile.tool_call_format)
    if prompt.native:
        return f"{prompt.format.name} markup, tools and calls rendered by the template"
    return ("the template writes no call markup spate parses: tools described in the system "
            f"prompt, calls in {prompt.format.name} markup")


def _gguf_kernel_paths(header: GgufHeader) -> tuple[tuple[str, str], ...]:
    # The fused op's block types come with the op (and torch): imported only here.
    from workers.model.group_quantized import SUPPORTED_TYPES

    matrices = sorted({info.type_name for info in header.tensors.values() if len(info.shape) == 2})
    at_size = [kind for kind in matrices if kind in SUPPORTED_TYPES]
    dense = [kind for kind in matrices if kind not in SUPPORTED_TYPES]
    fused = "; ".join(part for part in (
        f"{', '.join(at_size)} computed at their size by the fused quantized op" if at_size else "",
        f"{', '.join(dense)} {DENSE}" if dense else "",
    ) if part)
    torch_ops = DENSE + (
        f" (--weights quantized: {', '.join(at_size)} on torch's int4/int8 kernels)"
        if at_size else ""
    )
    return (("CPU, fused C++ ops (--kernels cpu)", fused),
            ("CPU, torch ops (--kernels torch)", torch_ops),
            ("Triton on CUDA (--kernels triton)", DENSE))


def _folder_kernel_paths() -> tuple[tuple[str, str], ...]:
    return (("CPU, fused C++ ops (--kernels cpu)", "dense weights, prepacked"),
            ("CPU, torch ops (--kernels torch)", "dense weights"),
            ("Triton on CUDA (--kernels triton)", "dense weights"))
