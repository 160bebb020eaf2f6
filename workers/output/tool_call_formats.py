"""Tool-call markup per model family: how a call is written, as the family's template writes
one in its history and its model was trained to write one.

    hermes       <tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>   (Qwen, Hermes)
    llama3_json  {"name": "f", "parameters": {...}}, maybe after <|python_tag|>   (Llama 3.x)
    mistral      [TOOL_CALLS]f[ARGS]{...}                                         (Mistral v11+)

The format is found from the template (workers/model/tool_call_markup.py); a template that
writes no call of a known shape gets hermes, written out in the prompt
(workers/output/tool_prompt.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from workers.model.tool_call_markup import HERMES, LLAMA3_JSON, MISTRAL


@dataclass(frozen=True, slots=True)
class ToolCallFormat:
    name: str
    # Texts that open a call block. `kept`: the opener is the call's own first characters
    # (a Llama 3 call is a bare JSON object), so the scanner reads it too.
    openers: tuple[str, ...]
    kept: tuple[bool, ...]
    # The key of the call object that holds the arguments (hermes, llama3_json).
    arguments_key: str = "arguments"
    # What closes a block; "" for a block that ends where its JSON object does.
    close_tag: str = ""
    # Grammar: a call to `name` is begin(name) + the arguments' JSON + end.
    begin: str = ""
    end: str = ""
    separator: str = "\n"
    # The opener of a call the grammar triggers on (a prefix of every begin).
    trigger: str = ""

    def call_begin(self, name: str) -> str:
        return self.begin.replace("{name}", json.dumps(name) if self.name != MISTRAL else name)

    def written(self, name: str, arguments: str) -> str:
        """A call as the model writes it, for a history the template does not render."""
        return f"{self.call_begin(name)}{_json_text(arguments)}{self.end}"


FORMATS = {
    HERMES: ToolCallFormat(
        HERMES, openers=("<tool_call>",), kept=(False,), close_tag="</tool_call>",
        begin='<tool_call>\n{"name": {name}, "arguments": ', end="}\n</tool_call>",
        trigger="<tool_call>",
    ),
    LLAMA3_JSON: ToolCallFormat(
        LLAMA3_JSON, openers=("<|python_tag|>", '{"name"'), kept=(False, True),
        arguments_key="parameters", begin='{"name": {name}, "parameters": ', end="}",
        separator="; ", trigger='{"name": ',
    ),
    MISTRAL: ToolCallFormat(
        MISTRAL, openers=("[TOOL_CALLS]",), kept=(False,), begin="[TOOL_CALLS]{name}[ARGS]",
        separator="", trigger="[TOOL_CALLS]",
    ),
}


def tool_call_format(name: str | None) -> ToolCallFormat:
    """The named format; hermes for a model whose own is unknown (spate writes it out)."""
    return FORMATS.get(name or HERMES, FORMATS[HERMES])


def _json_text(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False)
    except json.JSONDecodeError:
        return json.dumps(arguments)
