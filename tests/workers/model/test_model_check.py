"""`spate models check`: a file's family, quantization, context length, template, reasoning
format and kernel paths from its metadata alone, agreeing with what the loader builds; what
the loader refuses is refused in the loader's own one line, with the supported list, exit
code 1 and no traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.e2e.test_load_failures import write_unsupported_gguf
from tests.llama_cpp_tools import build_tools_available
from tests.processes import ROOT
from workers.model import load_model
from workers.model.group_quantized import SUPPORTED_TYPES
from workers.model.loader import read_checkpoint
from workers.model_check import check_model
from workers.output.tool_prompt import ToolPrompt

from .thinking_checkpoints import CONTEXT, THINKING_FAMILIES, write_thinking_checkpoint


@pytest.fixture(scope="module")
def thinking_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("transformers")
    folders = {}
    for family, spec in THINKING_FAMILIES.items():
        folders[family] = Path(tmp_path_factory.mktemp(f"check-{family}"))
        write_thinking_checkpoint(folders[family], spec)
    return folders


def spate_models_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", "models", "check", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("family", list(THINKING_FAMILIES))
def test_each_family_folder_is_described_as_the_loader_sees_it(
    thinking_folders: dict[str, Path], family: str
) -> None:
    folder = thinking_folders[family]
    report = check_model(folder)
    loaded = load_model(folder)
    assert report.family == loaded.config.architecture == family
    assert report.context_length == loaded.profile.context_length == CONTEXT
    assert report.reasoning == loaded.profile.describe_reasoning() != "none"
    start, end = THINKING_FAMILIES[family].markers
    ids = [loaded.tokenizer.token_to_id(marker) for marker in (start, end)]
    assert report.thinking_markers == f"{start} = token {ids[0]}, {end} = token {ids[1]}"
    tools = ToolPrompt(loaded.chat_template, loaded.profile.tool_call_format)
    assert report.tool_calls.startswith(f"{tools.format.name} markup") is tools.native
    assert report.quantization.startswith("none (safetensors: F32 x")
    assert report.template.startswith("present (chat_template.jinja")
    assert "served:           yes" in report.lines()


# The template each family's folder carries -> (reasoning format, tool-call markup), as
# docs/models.md lists them.
WRITTEN_OUT = "the template writes no call markup spate parses"
FORMATS = {
    "llama": ("<think>...</think>, opened by the template, always on", WRITTEN_OUT),
    "qwen2": ("<think>...</think>, opened by the template, switched by `enable_thinking`",
              WRITTEN_OUT),
    "qwen3": ("<think>...</think>, opened by the model, switched by `enable_thinking`",
              "hermes markup"),
    "mistral": ("[THINK]...[/THINK], opened by the model, switched by the default system prompt",
                "mistral markup"),
    "phi3": ("<think>...</think>, opened by the model, always on", WRITTEN_OUT),
    "gemma3": ("<think>...</think>, opened by the model, always on", WRITTEN_OUT),
    "smollm3": ("<think>...</think>, opened by the model, switched by `enable_thinking`",
                WRITTEN_OUT),
    "granite": ("<think>...</think>, opened by the model, switched by `thinking`", WRITTEN_OUT),
}


def test_the_family_formats_are_those_of_their_templates(
    thinking_folders: dict[str, Path]
) -> None:
    assert set(FORMATS) == set(thinking_folders)
    for family, folder in thinking_folders.items():
        report = check_model(folder)
        reasoning, tool_calls = FORMATS[family]
        assert report.reasoning == reasoning, family
        assert report.tool_calls.startswith(tool_calls), (family, report.tool_calls)
    assert check_model(thinking_folders["phi3"]).tool_calls.endswith("calls in hermes markup")


def test_a_q4_k_m_file_names_its_mix_and_where_blocks_run_at_their_size(families) -> None:
    if (reason := build_tools_available()) is not None:
        pytest.skip(reason)
    report = check_model(families.gguf("llama3", "Q4_K_M"))
    assert report.family == "llama" and report.architecture == "llama"
    assert report.context_length == 128
    assert report.quantization.startswith("Q4_K_M (")
    assert "Q4_K x" in report.quantization and "Q6_K x" in report.quantization
    assert report.tokenizer.startswith("gpt2 (byte-level BPE), pre-tokenizer gpt-2")
    assert report.template.startswith("present (the GGUF metadata")
    paths = dict(report.kernel_paths)
    # Each block type is computed at its size where the fused op decodes it, else dense.
    fused = paths["CPU, fused C++ ops (--kernels cpu)"].split("; ")
    for kind in ("Q4_K", "Q6_K"):
        [part] = [part for part in fused if kind in part]
        assert part.endswith("computed at their size by the fused quantized op" if kind in
                             SUPPORTED_TYPES else "dequantized to dense weights at load"), part
    assert paths["Triton on CUDA (--kernels triton)"] == "dequantized to dense weights at load"


def test_the_command_prints_the_report(thinking_folders: dict[str, Path]) -> None:
    done = spate_models_check(thinking_folders["qwen3"])
    assert done.returncode == 0, done.stderr
    assert "family:           qwen3 (architecture Qwen3ForCausalLM" in done.stdout
    assert "thinking markers: <think> = token" in done.stdout
    assert "served:           yes" in done.stdout


def _refusal(path: Path) -> str:
    """The command's one line for `path`, checked for its exit code and shape."""
    done = spate_models_check(path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"spate: cannot serve {str(path)!r}: ") and "supported: " in line
    return line


def test_an_unsupported_architecture_is_the_loaders_one_line(tmp_path: Path) -> None:
    path = write_unsupported_gguf(tmp_path / "mamba.gguf")
    line = _refusal(path)
    assert "unsupported GGUF architecture 'mamba'" in line
    with pytest.raises(ValueError) as refused:
        read_checkpoint(path)
    assert line.endswith(str(refused.value))


def _llama_gguf(path: Path, tokenizer_model: str = "gpt2",
                weight: np.ndarray | None = None) -> Path:
    """A header-complete one-layer llama GGUF file (its other tensors are not needed to
    check it)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(32)
    writer.add_feed_forward_length(64)
    writer.add_head_count(2)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_token_list(["a", "b", "</s>"])
    writer.add_token_types([1, 1, 3])
    writer.add_eos_token_id(2)
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    writer.add_tensor("token_embd.weight", np.zeros((3, 32), dtype=np.float32))
    if weight is not None:
        writer.add_tensor("blk.0.attn_q.weight", weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_an_unsupported_tokenizer_is_named(tmp_path: Path, thinking_folders) -> None:
    line = _refusal(_llama_gguf(tmp_path / "bert.gguf", tokenizer_model="bert"))
    assert "unsupported GGUF tokenizer model 'bert'" in line
    folder = tmp_path / "sentencepiece-folder"
    shutil.copytree(thinking_folders["llama"], folder)
    (folder / "tokenizer.json").rename(folder / "tokenizer.model")
    assert "unsupported tokenizer" in _refusal(folder)


def test_an_unsupported_quantization_is_named(tmp_path: Path, thinking_folders) -> None:
    weight = np.zeros((32, 32), dtype=np.int8)  # stored as I8, which no loader decodes
    line = _refusal(_llama_gguf(tmp_path / "int8.gguf", weight=weight))
    assert "unsupported GGUF quantization I8 (blk.0.attn_q.weight)" in line
    folder = tmp_path / "gptq-folder"
    shutil.copytree(thinking_folders["llama"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (folder / "config.json").write_text(json.dumps(config))
    assert "unsupported quantization 'gptq'" in _refusal(folder)
