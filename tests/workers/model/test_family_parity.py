"""Parity with transformers, family by family: tiny random checkpoints transformers wrote
(tests/workers/model/family_checkpoints.py), loaded from the folder on the CPU path (fused ops and
torch ops) and on the Triton path (interpreted here at tiny shapes), and converted by
llama.cpp's own converter (F16, Q8_0) and quantizer (Q4_K_M): every family at F16, the
quantized files once per distinct tensor layout (tests/workers/model/family_checkpoints.py).

A folder's prefill logits must be within 1e-3 of transformers' at every position and its
greedy continuation identical. A GGUF file's weights are rounded, so its logits get a
tolerance per format (measured worst over the families, with margin: F16 about 0.01,
Q8_0 about 0.03, Q4_K_M about 0.3 at these shapes), and F16 keeps transformers' greedy
tokens. Where llama-cpp-python is installed, llama.cpp's own logits on the same file are
compared too.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from kernels import cpu_ops
from tests.llama_cpp_tools import build_tools_available
from workers.model import load_model

from .family_checkpoints import NEW_TOKENS, PROMPT, QUANTIZED, SPECS, WINDOW
from .paged_runner import PagedRunner

FOLDER_TOLERANCE = 1e-3
# Relative to the reference's largest logit. Random weights with sharp attention amplify
# rounding: measured worst over these families 0.15% (F16), 6.8% (Q8_0), 67% (Q4_K_M, which
# shows the file loads and runs, not that it answers alike).
GGUF_TOLERANCE = {"F16": 0.005, "Q8_0": 0.1, "Q4_K_M": 0.8}
# Greedy tokens checked on Triton's interpreter, where every decode step costs seconds: the
# prefill logits cover every position and these steps the decode kernels (the 13th token
# starts a new KV block, and the window of 5 slides).
TRITON_NEW_TOKENS = 3


def _prefill_and_greedy(path: Path, backend: str, weights: str = "bf16",
                        new_tokens: int = NEW_TOKENS) -> tuple[torch.Tensor, list[int]]:
    """The prompt's logits at every position, and the greedy tokens after it: one prefill
    (its last row picks the first token), then a decode step per further token."""
    loaded = load_model(path, backend=backend, weights=weights)
    # Blocks of 4: a window of 5 and the 12-token prompt cross block boundaries.
    runner = PagedRunner(loaded.model, block_size=4, num_blocks=16)
    logits = runner.step({"p": PROMPT}, is_prefill=True, every_position=True)["p"]
    greedy = [int(logits[-1].argmax())]
    while len(greedy) < new_tokens:
        greedy.append(int(runner.step({"p": [greedy[-1]]}, is_prefill=False)["p"].argmax()))
    return logits, greedy


def _difference(logits: torch.Tensor, expected: torch.Tensor, positions: int) -> float:
    # A GGUF file may trim the padded vocabulary (Gemma 3): compare the rows both have.
    vocab = min(logits.shape[1], expected.shape[1])
    return (logits[:positions, :vocab] - expected[:positions, :vocab]).abs().max().item()


BACKENDS = [
    pytest.param("cpu", marks=pytest.mark.skipif(
        not cpu_ops.available(), reason="the fused CPU ops did not build here")),
    "torch",
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(SPECS))
def test_folder_matches_transformers(families, name, backend):
    expected = families.reference(name)
    logits, greedy = _prefill_and_greedy(families.directory(name), backend)
    difference = _difference(logits, expected.logits, len(PROMPT))
    print(f"{name} folder {backend}: max abs logit difference {difference:.3g}")
    assert difference < FOLDER_TOLERANCE
    assert greedy == expected.greedy


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
    reason="the Triton path needs CUDA or TRITON_INTERPRET=1",
)
@pytest.mark.parametrize("name", list(SPECS))
def test_triton_folder_matches_transformers(families, name):
    pytest.importorskip("triton")
    expected = families.reference(name)
    logits, greedy = _prefill_and_greedy(families.directory(name), "triton",
                                         new_tokens=TRITON_NEW_TOKENS)
    difference = _difference(logits, expected.logits, len(PROMPT))
    print(f"{name} folder triton: max abs logit difference {difference:.3g}")
    assert difference < FOLDER_TOLERANCE
    assert greedy == expected.greedy[:TRITON_NEW_TOKENS]


def _gguf_positions(name: str) -> int:
    # llama.cpp's converter writes Mistral as "llama" without its window, so its file
    # answers as transformers does only where the window reaches back to the start.
    return len(PROMPT) if SPECS[name].gguf_exact else WINDOW


# F16 for every family; the quantized files once per tensor layout (FamilySpec says which).
GGUF_CASES = [(name, kind) for name, spec in SPECS.items() for kind in ("F16", *QUANTIZED)
              if kind == "F16" or spec.quantized_layout]


@pytest.mark.parametrize(("name", "kind"), GGUF_CASES)
def test_gguf_matches_transformers(families, name, kind):
    if kind == "Q4_K_M" and (reason := build_tools_available()) is not None:
        pytest.skip(reason)
    path = families.gguf(name, kind)
    expected = families.reference(name)
    # `auto`: the file's own 8-bit groups on the fused CPU op where it builds.
    logits, greedy = _prefill_and_greedy(path, "auto", weights="auto")
    difference = _difference(logits, expected.logits, _gguf_positions(name))
    scale = expected.logits.abs().max().item()
    print(f"{name} {kind}: max abs logit difference {difference:.3g} (largest logit {scale:.3g})")
    assert difference < GGUF_TOLERANCE[kind] * scale
    if kind == "F16" and SPECS[name].gguf_exact:
        assert greedy == expected.greedy


@pytest.mark.parametrize("name", list(SPECS))
def test_gguf_matches_llama_cpp(families, name):
    llama_cpp = pytest.importorskip("llama_cpp")
    path = families.gguf(name, "F16")
    ours, _ = _prefill_and_greedy(path, "auto")
    model = llama_cpp.Llama(str(path), logits_all=True, n_ctx=64, verbose=False)
    model.eval(PROMPT)
    theirs = torch.tensor(model.scores[: len(PROMPT)], dtype=torch.float32)
    difference = _difference(ours, theirs, _gguf_positions(name))
    print(f"{name} F16 against llama.cpp: max abs logit difference {difference:.3g}")
    assert difference < GGUF_TOLERANCE["F16"] * theirs.abs().max().item()
