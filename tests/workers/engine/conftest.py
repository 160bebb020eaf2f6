"""One loaded default model for every engine test, and helpers to drive an engine to the end."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Run against this checkout even where an older editable install maps packages elsewhere.
REPO_ROOT = str(Path(__file__).resolve().parents[3])
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

DEFAULT_MODEL = "SmolLM2-135M-Instruct"


@dataclass
class Generation:
    """Everything an engine reported for one request."""

    outputs: list = field(default_factory=list)

    @property
    def token_ids(self) -> list[int]:
        return [token_id for output in self.outputs for token_id in output.new_token_ids]

    def text(self, channel: str = "text") -> str:
        return "".join(
            delta.text
            for output in self.outputs
            for delta in output.deltas
            if delta.channel == channel
        )

    @property
    def final(self):
        return self.outputs[-1]


def run_to_completion(engine, max_steps: int = 2000) -> dict[str, Generation]:
    generations: dict[str, Generation] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            return generations
        for output in engine.step():
            generations.setdefault(output.request_id, Generation()).outputs.append(output)
    raise RuntimeError(f"requests still unfinished after {max_steps} steps")


def plain_decoding():
    """Engine settings for tests that take a step's output for one token: no speculative
    decoding, whose steps may keep several."""
    from workers.engine.speculation import SpeculationConfig

    return SpeculationConfig(enabled=False)


@pytest.fixture(scope="session")
def loaded_model():
    from workers.model import load_model

    return load_model(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def bf16_model():
    """The default model in bfloat16 throughout (weights, activations, KV cache), as
    `--dtype bfloat16` serves it."""
    import torch

    from workers.model import load_model

    return load_model(DEFAULT_MODEL, dtype=torch.bfloat16)


@pytest.fixture(scope="session")
def served_model():
    """The default model as a CPU worker serves it by default: float32 activations, its
    dense linears computing in bfloat16 where the CPU has native bf16."""
    from workers.model import load_model, serving_dtype, serving_matmul_dtype

    dtype = serving_dtype("cpu")
    return load_model(DEFAULT_MODEL, dtype=dtype, matmul_dtype=serving_matmul_dtype("cpu", dtype))


@pytest.fixture(scope="session")
def quantized_model():
    """The default model computing with its GGUF file's own Q4_1 / Q8_0 weights, float32
    activations, as a CPU worker serves `--weights quantized` (exact float32 matmuls
    where the fused CPU ops build, torch's bfloat16 ones elsewhere)."""
    from workers.model import load_model

    return load_model(DEFAULT_MODEL, weights="quantized")


@pytest.fixture(scope="session")
def render_prompt(loaded_model):
    def render(question: str, enable_thinking: bool = False) -> tuple[list[int], bool]:
        text = loaded_model.chat_template.render(
            [{"role": "user", "content": question}], enable_thinking=enable_thinking
        )
        return loaded_model.tokenizer.encode(text), loaded_model.profile.prompt_opens_reasoning(
            text
        )

    return render


@pytest.fixture
def make_engine(loaded_model):
    from workers.engine import EngineConfig, LLMEngine

    def make(loaded=None, **config):
        config.setdefault("num_kv_blocks", 256)
        return LLMEngine(loaded or loaded_model, EngineConfig(**config))

    return make
