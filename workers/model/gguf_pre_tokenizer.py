"""How a byte-level BPE vocabulary splits text into words before merging, by the name a GGUF
file gives it (`tokenizer.ggml.pre`), as llama.cpp's `llama-vocab.cpp` maps those names."""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Regex, pre_tokenizers

_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Mistral's tekken and OpenAI's o200k (Phi-4-mini) split on case changes. llama.cpp
# approximates the case classes for its regex engine (non-ASCII letters count as both
# cases there); these are the patterns the tokenizers were trained with, as `transformers`
# applies them.
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_TEKKEN = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# DeepSeek's first models list the letters of many scripts by hand. Written as escapes so
# that no editor can normalize a character into a neighbouring one.
_DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a"
    "\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556"
    "\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b"
    "\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184"
    "\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
    "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943"
)
_DEEPSEEK_PUNCTUATION = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"


@dataclass(frozen=True, slots=True)
class PreTokenizerRule:
    """Regexes applied in turn, each cutting every piece so far around its matches (matched
    and unmatched text both stay, as llama.cpp's `unicode_regex_split` does). With
    `ignore_merges`, a word that is itself in the vocabulary is one token without merging."""

    splits: tuple[str, ...]
    ignore_merges: bool = False


_GPT2_RULE = PreTokenizerRule((_GPT2,))
_STARCODER = PreTokenizerRule((r"\p{N}", _GPT2))
_LLAMA3_RULE = PreTokenizerRule((_LLAMA3,), ignore_merges=True)
_QWEN2_RULE = PreTokenizerRule((_QWEN2,))
_GPT4O_RULE = PreTokenizerRule((_GPT4O,))
_RULES: dict[str, PreTokenizerRule] = {
    # llama.cpp's fallback for a file that names no pre-tokenizer.
    "default": PreTokenizerRule((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]")),
    **dict.fromkeys(
        (
            "gpt-2",
            "phi-2",
            "mpt",
            "olmo",
            "exaone4",
            "granite-docling",
            "trillion",
            "gigachat",
            "a.x-4.0",
            "mellum",
        ),
        _GPT2_RULE,
    ),
    **dict.fromkeys(
        (
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ),
        _STARCODER,
    ),
    **dict.fromkeys(
        (
            "llama-bpe",
            "llama3",
            "llama-v3",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
            "glm4",
        ),
        _LLAMA3_RULE,
    ),
    "dbrx": PreTokenizerRule((_LLAMA3,)),
    "smaug-bpe": PreTokenizerRule((_LLAMA3,)),
    "chatglm-bpe": PreTokenizerRule((_LLAMA3,)),
    **dict.fromkeys(
        (
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ),
        _QWEN2_RULE,
    ),
    "qwen35": PreTokenizerRule((_QWEN35,)),
    "tekken": PreTokenizerRule((_TEKKEN,), ignore_merges=True),
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), _GPT4O_RULE),
    "deepseek-llm": PreTokenizerRule(
        (
            r"[\r\n]",
            rf"\s?[{_DEEPSEEK_LETTERS}]+",
            _DEEPSEEK_PUNCTUATION,
            r"\s+$",
            _CJK,
            r"\p{N}+",
        )
    ),
    "deepseek-coder": PreTokenizerRule((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")),
    "falcon": PreTokenizerRule(
        (
            r"[\p{P}\$\+<=>\^~\|`]+",
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
            "[0-9][0-9][0-9]",
        )
    ),
}

SUPPORTED_PRE_TOKENIZERS = tuple(sorted(_RULES))


def pre_tokenizer_rule(name: str) -> PreTokenizerRule:
    rule = _RULES.get(name)
    if rule is None:
        raise ValueError(
            f"unsupported GGUF pre-tokenizer {name!r}; supported: "
            + ", ".join(SUPPORTED_PRE_TOKENIZERS)
        )
    return rule


def byte_level_pre_tokenizer(rule: PreTokenizerRule) -> pre_tokenizers.PreTokenizer:
    """The rule's splits, then each word spelled in GPT-2's byte alphabet."""
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated") for split in rule.splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
