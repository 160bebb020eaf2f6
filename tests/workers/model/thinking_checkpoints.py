"""Tiny checkpoints of each served family that think: the family's config
(family_checkpoints.SPECS), a real chat template with think markers (llama.cpp's copies), a
tokenizer holding the template's special tokens and the markers as single tokens, and
weights designed so that greedy decoding walks a known path.

Random weights give random tokens, and a model-opened format (Qwen3, SmolLM3, Granite,
Magistral, Phi-4-mini-reasoning's and Gemma's plain templates with think tokens in the
vocabulary) needs the model itself to write the start marker. So the output projection is
a next-token table over the embeddings: the generation prompt's last token leads to the
start marker (or, where the template opened the block, straight into the thinking), the
thinking is a cycle of words that never closes the block, the end marker leads to a
two-word answer and the answer to the end of turn. The family's layers run as they are
(transformers' initialization, small against unit-size embeddings), so the table holds
whatever they compute; parity of the layers is tests/workers/model/test_family_parity.py's business.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from harness.tiny_checkpoint import CORPUS
from tests.llama_cpp_source import llama_cpp_tree, template
from workers.model.chat_template import ChatTemplate
from workers.model.model_profile import detect_profile

from .family_checkpoints import COMMON, SPECS, FamilySpec, architecture_of

QUESTION = "What is the capital of France?"
THINK = ("<think>", "</think>")
R1_BOS, R1_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
R1_TOKENS = ("<｜User｜>", "<｜Assistant｜>")
IM_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
# Words for the thinking and the answer to be made of.
WORDS = ["first think about the question then answer with one city name"] * 4
# Long enough for Magistral's default system prompt in a 300-token vocabulary.
CONTEXT = 4096
# |logit| of the next token the table names: hidden states are RMS-normed to length
# sqrt(hidden), so its logit is about 16 and any other's about N(0, 1).
TABLE_SCALE = 1.0


@dataclass(frozen=True)
class ThinkingFamily:
    family: str  # the name in workers/model/families.py
    spec: FamilySpec
    template: str  # the stem under llama.cpp's models/templates/
    bos_token: str | None
    eos_token: str
    special_tokens: tuple[str, ...]
    markers: tuple[str, str] = THINK
    # [THINK] is a control token of Mistral's vocabularies; <think> an added plain token.
    special_markers: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


THINKING_FAMILIES = {
    family.family: family
    for family in (
        ThinkingFamily("llama", SPECS["llama3"], "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
                       R1_BOS, R1_EOS, R1_TOKENS),
        ThinkingFamily("qwen2", SPECS["qwen2"], "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                       R1_BOS, R1_EOS, R1_TOKENS),
        ThinkingFamily("qwen3", FamilySpec("qwen3", "Qwen3Config", {"head_dim": 48}),
                       "Qwen-Qwen3-0.6B", None, "<|im_end|>",
                       (*IM_TOKENS, "<tool_call>", "</tool_call>")),
        ThinkingFamily("mistral", SPECS["mistral"], "mistralai-Ministral-3-14B-Reasoning-2512",
                       "<s>", "</s>",
                       ("[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]",
                        "[TOOL_CALLS]", "[ARGS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                        "[TOOL_RESULTS]", "[/TOOL_RESULTS]"),
                       markers=("[THINK]", "[/THINK]"), special_markers=True),
        # Phi-4-mini-reasoning and Gemma: their plain templates, think tokens in the
        # vocabulary, the model opening the block.
        ThinkingFamily("phi3", SPECS["phi3"], "microsoft-Phi-3.5-mini-instruct", "<s>",
                       "<|endoftext|>", ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")),
        ThinkingFamily("gemma3", SPECS["gemma3"], "google-gemma-2-2b-it", "<bos>", "<eos>",
                       ("<start_of_turn>", "<end_of_turn>")),
        ThinkingFamily("smollm3", SPECS["smollm3"], "HuggingFaceTB-SmolLM3-3B", None,
                       "<|im_end|>", IM_TOKENS),
        ThinkingFamily("granite", SPECS["granite"], "ibm-granite-granite-3.3-2B-Instruct",
                       "<|end_of_text|>", "<|end_of_text|>",
                       ("<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>")),
    )
}


@dataclass(frozen=True)
class ThinkingPath:
    """The token ids greedy decoding walks after the prompt."""

    prompt_last: int
    start: int
    end: int
    opened_by_template: bool
    thinking: tuple[int, ...]  # a cycle: the model never closes the block itself
    answer: tuple[int, ...]
    eos: int
    # The text of each thinking and answer token.
    texts: dict[int, str] = field(default_factory=dict)

    def output(self, budget: int) -> list[int]:
        """The output with `budget` thinking tokens, the end marker forced after them."""
        thoughts = [self.thinking[i % len(self.thinking)] for i in range(budget)]
        opened = [] if self.opened_by_template else [self.start]
        return [*opened, *thoughts, self.end, *self.answer, self.eos]

    def reasoning_text(self, budget: int) -> str:
        return "".join(self.texts[self.thinking[i % len(self.thinking)]] for i in range(budget))

    def answer_text(self) -> str:
        return "".join(self.texts[token_id] for token_id in self.answer)


def _tokenizer(family: ThinkingFamily) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = [family.eos_token, *([family.bos_token] if family.bos_token else []),
                *family.special_tokens]
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=list(dict.fromkeys(specials)),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator([*CORPUS, *WORDS], trainer)
    markers = [AddedToken(m, special=family.special_markers, normalized=False)
               for m in family.markers]
    if family.special_markers:
        tokenizer.add_special_tokens(markers)
    else:
        tokenizer.add_tokens(markers)
    return tokenizer


def _words(tokenizer: Tokenizer, count: int, skip: set[int]) -> list[int]:
    """Plain lowercase word tokens (no marker, special or the prompt's last token)."""
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    words = sorted(i for t, i in vocab.items() if t.startswith("Ġ") and t[1:].isalpha()
                   and t[1:].islower() and len(t) >= 4)
    return [i for i in words if i not in skip][:count]


def _prompt_end(family: ThinkingFamily, tokenizer: Tokenizer, source: str) -> tuple[int, bool]:
    """The last prompt token of the test's request, rendered as the worker renders it, and
    whether the prompt opens the think block."""
    profile = detect_profile(family.family, CONTEXT, tokenizer.get_vocab(), source,
                             bos_token=family.bos_token, eos_token=family.eos_token)
    chat = ChatTemplate(source, family.bos_token, family.eos_token,
                        default_kwargs=dict(profile.default_chat_template_kwargs),
                        thinking_switch=profile.thinking_switch)
    text = chat.render([{"role": "user", "content": QUESTION}], enable_thinking=True,
                       reasoning_effort="low")
    return int(tokenizer.encode(text, add_special_tokens=False).ids[-1]), (
        profile.prompt_opens_reasoning(text))


def write_thinking_checkpoint(directory: Path, family: ThinkingFamily,
                              seed: int = 5) -> ThinkingPath:
    """Write the folder (transformers' save_pretrained); return the path it decodes."""
    import transformers

    source = template(llama_cpp_tree(), family.template)
    tokenizer = _tokenizer(family)
    token = tokenizer.token_to_id
    start, end, eos = token(family.markers[0]), token(family.markers[1]), token(family.eos_token)
    prompt_last, opened_by_template = _prompt_end(family, tokenizer, source)
    words = _words(tokenizer, 9, {prompt_last})
    path = ThinkingPath(prompt_last, start, end, opened_by_template=opened_by_template,
                        thinking=tuple(words[:7]), answer=tuple(words[7:9]), eos=eos,
                        texts={word: tokenizer.decode([word]) for word in words})

    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    settings = {**COMMON, **family.spec.settings, "vocab_size": vocab_size,
                "max_position_embeddings": CONTEXT, "tie_word_embeddings": False,
                "bos_token_id": token(family.bos_token) if family.bos_token else None,
                "eos_token_id": eos, "pad_token_id": eos}
    config = getattr(transformers, family.spec.config_class)(**settings)
    config.architectures = [architecture_of(family.spec.config_class)]
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _write_table(model, path, seed)
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "chat_template.jinja").write_text(source)
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": family.bos_token, "eos_token": family.eos_token,
    }))
    return path


def _write_table(model: Any, path: ThinkingPath, seed: int) -> None:
    """Unit-size random embeddings, and an output projection whose row for token `b` points
    along the embedding of each token `a` that `b` follows."""
    generator = torch.Generator().manual_seed(seed)
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    first = path.thinking[0]
    steps = [(path.prompt_last, first if path.opened_by_template else path.start),
             (path.start, first), (path.end, path.answer[0]), (path.answer[-1], path.eos)]
    steps += list(zip(path.thinking, (*path.thinking[1:], first), strict=True))
    steps += list(zip(path.answer, path.answer[1:], strict=False))
    with torch.no_grad():
        embedding.copy_(torch.randn(embedding.shape, generator=generator))
        head.zero_()
        for before, after in steps:
            head[after] += TABLE_SCALE * embedding[before] / embedding[before].norm()
