"""GGUF tokenizers against llama.cpp's own vocabularies (`models/ggml-vocab-*.gguf`) and the
token ids its tests expect for every case of their `.inp` files (`.out`), tokenized as
llama.cpp's test-tokenizer-0 does: no BOS/EOS added, special tokens not parsed."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from tests.llama_cpp_source import llama_cpp_tree, vocab_files
from workers.model.detokenizer import IncrementalDetokenizer
from workers.model.gguf_pre_tokenizer import (
    SUPPORTED_PRE_TOKENIZERS,
    byte_level_pre_tokenizer,
    pre_tokenizer_rule,
)
from workers.model.gguf_tokenizer import (
    TOKEN_TYPE_NORMAL,
    GgufVocabulary,
    build_gguf_tokenizer,
    read_gguf_vocabulary,
)
from workers.model.tokenizer import Tokenizer

from .llama_cpp_tokenizer_reference import gemma4_reference, sentencepiece_reference

# Vocabulary file -> the families it stands for.
SUPPORTED = {
    "llama-spm": "SentencePiece: Llama 2, Mistral v0.1-v0.3",
    "phi-3": "SentencePiece: Phi-3, Phi-3.5",
    "gemma-4": "gemma4: Gemma 4",
    "llama-bpe": "llama-bpe: Llama 3.x, DeepSeek-R1-Distill-Llama, SmolLM3",
    "qwen2": "qwen2: Qwen2/2.5, QwQ, DeepSeek-R1-Distill-Qwen (deepseek-r1-qwen)",
    "qwen35": "qwen35: Qwen3.5",
    "deepseek-llm": "deepseek-llm: DeepSeek LLM",
    "deepseek-coder": "deepseek-coder: DeepSeek Coder",
    "gpt-2": "gpt-2: GPT-2, Phi-2",
    "starcoder": "starcoder: StarCoder 2",
    "refact": "refact: Refact, Granite 3 (code) vocabularies",
    "command-r": "command-r: Command R",
    "falcon": "falcon: Falcon",
    "mpt": "mpt: MPT, GPT-NeoX style (space-run user tokens)",
}
UNSUPPORTED = {"bert-bge": "bert"}  # WordPiece: an embedding model's tokenizer

_SEPARATOR = "\n__ggml_vocab_test__\n"


@dataclasses.dataclass
class VocabularyFile:
    path: Path
    vocabulary: GgufVocabulary
    tokenizer: Tokenizer
    cases: list[tuple[str, list[int]]]


def _cases(path: Path) -> list[tuple[str, list[int]]]:
    """test-tokenizer-0.cpp's reading: inputs cut at the marker line, one output line each."""
    texts = Path(f"{path}.inp").read_bytes().decode("utf-8").split(_SEPARATOR)
    if texts and texts[-1] == "":
        texts.pop()  # the file ends with a marker
    expected = [
        [int(token) for token in line.split()]
        for line in Path(f"{path}.out").read_text().splitlines()
    ]
    assert len(texts) == len(expected), f"{path.name}: {len(texts)} inputs, {len(expected)} outputs"
    return list(zip(texts, expected, strict=True))


@pytest.fixture(scope="session")
def vocabulary_paths() -> dict[str, Path]:
    return {
        path.name[len("ggml-vocab-") : -len(".gguf")]: path
        for path in vocab_files(llama_cpp_tree())
    }


@pytest.fixture(scope="session")
def vocabulary_file(vocabulary_paths):
    """Each vocabulary read and built once per test session."""
    loaded: dict[str, VocabularyFile] = {}

    def load(name: str) -> VocabularyFile:
        if name not in loaded:
            path = vocabulary_paths[name]
            vocabulary = read_gguf_vocabulary(path)
            backend = build_gguf_tokenizer(vocabulary)
            eos = vocabulary.tokens.index("</s>") if "</s>" in vocabulary.tokens else 0
            loaded[name] = VocabularyFile(path, vocabulary, Tokenizer(backend, [eos]), _cases(path))
        return loaded[name]

    return load


def test_every_vocabulary_file_is_supported_or_refused(vocabulary_paths):
    assert set(vocabulary_paths) == set(SUPPORTED) | set(UNSUPPORTED)


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_tokenizes_every_case_as_llama_cpp(vocabulary_file, name):
    file = vocabulary_file(name)
    mismatches = [
        (text, expected, got)
        for text, expected in file.cases
        if (got := file.tokenizer.encode(text, parse_special=False)) != expected
    ]
    matched = len(file.cases) - len(mismatches)
    print(f"{name}: {matched}/{len(file.cases)} cases match llama.cpp")
    assert not mismatches, f"{name}: {matched}/{len(file.cases)} match; first: {mismatches[:3]}"


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_decoding_gives_the_text_back(vocabulary_file, name):
    file = vocabulary_file(name)
    for text, expected in file.cases:
        assert file.tokenizer.decode(expected, skip_special_tokens=False) == text


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_model_is_refused_in_one_line(vocabulary_paths, name):
    with pytest.raises(ValueError) as refusal:
        build_gguf_tokenizer(read_gguf_vocabulary(vocabulary_paths[name]))
    message = str(refusal.value)
    assert "\n" not in message
    assert repr(UNSUPPORTED[name]) in message
    assert "gpt2" in message and "llama" in message


def test_unsupported_pre_tokenizer_is_refused_in_one_line(vocabulary_file):
    vocabulary = dataclasses.replace(vocabulary_file("gpt-2").vocabulary, pre="made-up-pre")
    with pytest.raises(ValueError) as refusal:
        build_gguf_tokenizer(vocabulary)
    message = str(refusal.value)
    assert "\n" not in message
    assert "'made-up-pre'" in message
    assert "qwen2" in message and "llama-bpe" in message


@pytest.mark.parametrize("name", SUPPORTED_PRE_TOKENIZERS)
def test_every_pre_tokenizer_compiles_and_splits(name):
    words = byte_level_pre_tokenizer(pre_tokenizer_rule(name)).pre_tokenize_str(
        "Hello world's 12345 x\n\n  y"
    )
    assert "".join(word for word, _ in words) == "HelloĠworld'sĠ12345ĠxĊĊĠĠy"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("tekken", ["Hello", "World", "Ġ", "1", "2", "3", "4"]),
        ("gpt-4o", ["Hello", "World", "Ġ", "123", "4"]),
        ("llama-bpe", ["HelloWorld", "Ġ", "123", "4"]),
        ("qwen2", ["HelloWorld", "Ġ", "1", "2", "3", "4"]),
        ("smollm", ["HelloWorld", "Ġ", "1", "2", "3", "4"]),
    ],
)
def test_case_and_digit_splits(name, words):
    """Mistral's tekken and o200k split at a change of case; digits go one, or three, at a time."""
    split = byte_level_pre_tokenizer(pre_tokenizer_rule(name)).pre_tokenize_str("HelloWorld 1234")
    assert [word for word, _ in split] == words


def _random_texts(file: VocabularyFile, count: int, seed: int) -> list[str]:
    """Vocabulary pieces, runs of spaces and newlines and snippets of the test inputs glued
    together: text where merge order and byte fallback both matter."""
    rng = random.Random(seed)
    corpus = "".join(text for text, _ in file.cases)
    pieces = [
        token.replace("\u2581", " ")
        for token, kind in zip(file.vocabulary.tokens, file.vocabulary.token_types, strict=True)
        if kind == TOKEN_TYPE_NORMAL
    ]
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randrange(1, 10)):
            draw = rng.random()
            if draw < 0.45:
                parts.append(rng.choice(pieces))
            elif draw < 0.6:
                parts.append(" " * rng.randrange(1, 5))
            elif draw < 0.7:
                parts.append("\n" * rng.randrange(1, 40))
            else:
                start = rng.randrange(len(corpus))
                parts.append(corpus[start : start + rng.randrange(1, 8)])
        texts.append("".join(parts))
    return texts


@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "gemma-4"])
def test_random_text_merges_as_llama_cpp_does(vocabulary_file, name):
    """Merges by score (SentencePiece) and by rank (gemma4) against a line-for-line copy of
    llama.cpp's merge loop, on text no `.out` file covers."""
    file = vocabulary_file(name)
    vocabulary = file.vocabulary
    vocab = {token: index for index, token in enumerate(vocabulary.tokens)}
    whole = [
        token
        for token, kind in zip(vocabulary.tokens, vocabulary.token_types, strict=True)
        if kind != TOKEN_TYPE_NORMAL and len(token) > 1
    ]
    ranks: dict[tuple[str, str], int] = {}
    for rank, merge in enumerate(vocabulary.merges):
        cut = merge.find(" ", 1)
        ranks.setdefault((merge[:cut], merge[cut + 1 :]), rank)
    checked = 0
    for text in _random_texts(file, count=400, seed=7):
        if any(token in text for token in whole):
            continue  # matched whole before merging: not what the reference covers
        if vocabulary.model == "gemma4":
            expected = gemma4_reference(text, vocab, ranks)
        else:
            expected = sentencepiece_reference(
                text, vocab, vocabulary.scores, vocabulary.add_space_prefix
            )
        assert file.tokenizer.encode(text, parse_special=False) == expected, repr(text)
        checked += 1
    assert checked > 300


def test_sentencepiece_special_tokens_and_space_prefix(vocabulary_file):
    """Text after a special token gets its own prefix space, as in llama.cpp."""
    tokenizer = vocabulary_file("llama-spm").tokenizer
    bos = tokenizer.token_to_id("<s>")
    hello = tokenizer.token_to_id("\u2581Hello")
    assert tokenizer.encode("<s>Hello") == [bos, hello]
    assert tokenizer.encode("<s>Hello", parse_special=False)[0] != bos
    assert tokenizer.decode([bos, hello]) == "Hello"
    assert tokenizer.decode([bos, hello], skip_special_tokens=False) == "<s> Hello"


def test_phi3_special_tokens_swallow_the_whitespace_after_them(vocabulary_file):
    tokenizer = vocabulary_file("phi-3").tokenizer
    user, end = tokenizer.token_to_id("<|user|>"), tokenizer.token_to_id("<|end|>")
    hi = tokenizer.token_to_id("\u2581Hi")
    assert tokenizer.encode("<|user|>\nHi<|end|>\n") == [user, hi, end]


@pytest.mark.parametrize("name", ["llama-spm", "gemma-4"])
def test_incremental_decoding_of_byte_fallback_and_space_markers(vocabulary_file, name):
    tokenizer = vocabulary_file(name).tokenizer
    text = "Hello 🦙 world,  café 日本語\n\n  x 😶\u200d🌫️"
    ids = tokenizer.encode(text)
    detokenizer = IncrementalDetokenizer(tokenizer)
    deltas = [detokenizer.push(token_id) for token_id in ids]
    deltas.append(detokenizer.flush())
    assert "".join(deltas) == tokenizer.decode(ids) == text
    assert not any("\ufffd" in delta for delta in deltas)
    llama = tokenizer.encode("🦙")
    assert len(llama) > 1, "the llama emoji should take several byte tokens"
    detokenizer = IncrementalDetokenizer(tokenizer)
    assert [detokenizer.push(token_id) for token_id in llama][:-1] == [""] * (len(llama) - 1)


def test_incremental_decoding_after_a_prompt_is_the_text_in_context(vocabulary_file):
    """The answer's first word keeps the space its `▁` stands for after the prompt, and the
    prompt itself is not emitted."""
    tokenizer = vocabulary_file("llama-spm").tokenizer
    prompt = tokenizer.encode("<s>[INST] Where? [/INST]")
    answer = tokenizer.encode("Paris is nice.")
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_token_ids=prompt)
    text = "".join(detokenizer.push(token_id) for token_id in answer) + detokenizer.flush()
    in_context = tokenizer.decode(prompt + answer)
    assert text == in_context[len(tokenizer.decode(prompt)) :] == " Paris is nice."


@pytest.mark.parametrize(
    ("name", "token", "text"),
    [
        ("llama-spm", "\u2581Hello", " Hello"),
        ("llama-spm", "Hello", "Hello"),
        ("llama-spm", "<0x0A>", "\n"),
        ("gemma-4", "\u2581Hello", " Hello"),
        ("qwen2", "\u0120Hello", " Hello"),
    ],
)
def test_token_text_keeps_a_leading_space(vocabulary_file, name, token, text):
    """A token's text as logprobs show it: the space its `▁` stands for stays, which decoding
    the token alone as a whole text would drop."""
    tokenizer = vocabulary_file(name).tokenizer
    assert tokenizer.token_text(tokenizer.token_to_id(token)) == text
