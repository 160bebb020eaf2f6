"""Tool-call markup per family: found from the real template, parsed from the text the
family's template writes for a call (however the text is cut), and held by a grammar that
accepts exactly that markup."""

from __future__ import annotations

import random
from typing import Any

import pytest
import xgrammar as xgr

from events import ChatMessage, RequestAccepted, ToolDefinition
from tests.workers.model.family_templates import FAMILY_TEMPLATES
from workers.engine.grammar import GrammarCompiler
from workers.model.chat_template import ChatTemplate
from workers.model.model_profile import detect_profile
from workers.output.structured_output import compile_answer_grammar
from workers.output.tool_call_formats import FORMATS, tool_call_format
from workers.output.tool_calls import (
    ArgumentsDelta,
    CallEnded,
    CallStarted,
    MessageText,
    ToolCallParser,
)
from workers.output.tool_prompt import ToolPrompt

EXPECTED = {
    "Qwen-QwQ-32B": "hermes", "Qwen-Qwen2.5-7B-Instruct": "hermes", "Qwen-Qwen3-0.6B": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3_json",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3_json",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3_json",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",
    # Templates that write no call spate parses: spate writes tools and calls out (hermes).
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": None, "HuggingFaceTB-SmolLM3-3B": None,
    "microsoft-Phi-3.5-mini-instruct": None, "ibm-granite-granite-3.3-2B-Instruct": None,
}
FAMILIES = {family.name: family for family in FAMILY_TEMPLATES}
WEATHER = ToolDefinition(
    name="get_weather", param="tools[0].parameters",
    parameters={"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"], "additionalProperties": False},
)
CALL = ChatMessage(role="assistant", content="", tool_calls=(
    {"call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},))
CONVERSATION = (
    ChatMessage(role="user", content="Weather in Paris?"), CALL,
    ChatMessage(role="tool", content="sunny", tool_call_id="call_1"),
)


def request(**fields: Any) -> RequestAccepted:
    return RequestAccepted(response_id="resp_t", seq=0, model="m", messages=CONVERSATION,
                           tools=(WEATHER,), **fields)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_family_call_markup_is_found(name: str) -> None:
    family = FAMILIES[name]
    profile = detect_profile(name, 100, {}, family.source, bos_token=family.bos_token,
                             eos_token=family.eos_token)
    assert profile.tool_call_format == EXPECTED[name]


def written_by_template(name: str) -> str:
    """The assistant's call as the family's real template writes it in the history."""
    family = FAMILIES[name]
    template = ChatTemplate(family.source, family.bos_token, family.eos_token)
    profile = detect_profile(name, 100, {}, family.source, bos_token=family.bos_token,
                             eos_token=family.eos_token)
    prompt = ToolPrompt(template, profile.tool_call_format)
    assert prompt.native
    messages, tools = prompt.render_inputs(request())
    text = template.render(messages, tools=tools, add_generation_prompt=False)
    after_question = text[text.rfind("Weather in Paris?") + len("Weather in Paris?"):]
    start = min(after_question.find(opener) for opener in prompt.format.openers
                if opener in after_question)
    return after_question[start:]


def parse(call_format: str, chunks: list[str]) -> list[Any]:
    parser = ToolCallParser(tool_call_format(call_format))
    pieces = [piece for chunk in chunks for piece in parser.feed(chunk)] + parser.finish()
    calls = [(piece.name if isinstance(piece, CallStarted) else piece.arguments)
             for piece in pieces if isinstance(piece, CallStarted | CallEnded)]
    deltas = "".join(piece.text for piece in pieces if isinstance(piece, ArgumentsDelta))
    text = "".join(piece.text for piece in pieces if isinstance(piece, MessageText))
    return [calls, deltas, text]


@pytest.mark.parametrize(("name", "end"), [
    ("Qwen-Qwen3-0.6B", "<|im_end|>"), ("meta-llama-Llama-3.1-8B-Instruct", "<|eot_id|>"),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "</s>"),
])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_call_the_template_writes_parses_however_it_is_cut(name: str, end: str, seed: int) -> None:
    written = written_by_template(name)
    call_text = "I will look.\n" + written[:written.index(end)]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(call_text)), 8))
    chunks = [call_text[a:b] for a, b in zip([0, *cuts], [*cuts, len(call_text)], strict=True)]
    call_format = EXPECTED[name]
    assert call_format is not None
    expected = [["get_weather", '{"city": "Paris"}'], '{"city": "Paris"}', "I will look."]
    assert parse(call_format, [call_text]) == expected
    assert parse(call_format, chunks) == expected


def test_two_calls_in_each_markup() -> None:
    two = {
        "hermes": '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
                  '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
        "llama3_json": '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; '
                       '{"name": "b", "parameters": {}}',
        "mistral": '[TOOL_CALLS]a[ARGS]{"x": 1}[TOOL_CALLS]b[CALL_ID]a1b2c3d4e[ARGS]{}',
    }
    for call_format, text in two.items():
        assert parse(call_format, [text]) == [["a", '{"x": 1}', "b", "{}"], '{"x": 1}{}', ""]


@pytest.fixture(scope="module")
def compiler(checkpoint) -> GrammarCompiler:
    return GrammarCompiler(checkpoint.tokenizer, checkpoint.config.vocab_size)


def accepts(compiler: GrammarCompiler, call_format: str, req: RequestAccepted, text: str) -> bool:
    grammar = compile_answer_grammar(compiler, req, FORMATS[call_format])
    assert grammar is not None
    matcher = xgr.GrammarMatcher(grammar)
    return matcher.accept_string(text) and matcher.is_completed()


@pytest.mark.parametrize("call_format", list(FORMATS))
def test_the_grammar_holds_calls_to_the_family_markup(compiler, call_format: str) -> None:
    markup = FORMATS[call_format]
    call = markup.written("get_weather", '{"city": "Paris"}')
    required = request(tool_choice="required")
    assert accepts(compiler, call_format, required, call)
    assert not accepts(compiler, call_format, required, call.replace("city", "town"))
    other = FORMATS["hermes" if call_format != "hermes" else "mistral"]
    assert not accepts(compiler, call_format, required, other.written("get_weather",
                                                                      '{"city": "Paris"}'))
    auto = request(tool_choice="auto")
    assert accepts(compiler, call_format, auto, "It is sunny.")
    assert accepts(compiler, call_format, auto, f"Let me look.{call}")
    assert parse(call_format, [call])[0] == ["get_weather", '{"city": "Paris"}']
