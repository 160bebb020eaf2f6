"""The small files of a Hugging Face model folder beside its weights: config.json,
tokenizer.json, tokenizer_config.json, generation_config.json and the chat template. Read
without torch, so `spate models check` says what a folder is as fast as the loader finds out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as BackendTokenizer


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file's object; {} where the file is absent."""
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as file:
        data: dict[str, Any] = json.load(file)
    return data


def read_config_json(directory: Path) -> dict[str, Any]:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{directory} has no config.json")
    return read_json(config_file)


def read_backend_tokenizer(directory: Path) -> BackendTokenizer:
    """The folder's tokenizer.json (a SentencePiece tokenizer.model alone is not read)."""
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
        found = " (only a SentencePiece tokenizer.model)" if (
            directory / "tokenizer.model").is_file() else ""
        raise ValueError(
            f"unsupported tokenizer: {directory} has no tokenizer.json{found}; supported: "
            "a tokenizer.json (Hugging Face tokenizers), or the vocabulary of a GGUF file"
        )
    return BackendTokenizer.from_file(str(tokenizer_file))


def token_text(value: Any) -> str | None:
    """tokenizer_config.json spells special tokens as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def chat_template(directory: Path, tokenizer_config: dict[str, Any]) -> str | None:
    # A standalone chat_template.jinja wins, as in transformers.
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {entry["name"]: entry["template"] for entry in template}
        template = named.get("default")
    return template if isinstance(template, str) else None
