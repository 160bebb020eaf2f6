"""ChatTemplate: renders a model's Jinja chat template the way Hugging Face's apply_chat_template does.

Same environment (sandbox, trim_blocks/lstrip_blocks, loopcontrols, `raise_exception`,
`strftime_now`, a plain-JSON `tojson`, `dict`, a namespace without dunder attributes) and
the same conversation as the template sees it: keys whose value is None dropped (templates
test `'tool_calls' in message`), a message's reasoning under both `reasoning_content` and
`thinking`, `tools` and `documents` always defined.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

if TYPE_CHECKING:  # reasoning_format renders templates to find a switch
    from workers.model.reasoning_format import ThinkingSwitch

# Names render() sets itself; kwargs may not override them.
_RESERVED = frozenset({"messages", "tools", "documents", "add_generation_prompt"})
# A message's reasoning, by the names clients and templates use for it; the first one set wins.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(ValueError):
    """The template raised (raise_exception) or failed to render: the request is malformed."""


class _GenerationBlock(Extension):
    """Accepts `{% generation %}...{% endgeneration %}` (training-mask markers) and renders the body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        body: list[nodes.Node] = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return body


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes HTML characters; chat templates expect plain JSON.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """`dict(...)` for templates, without the type itself (whose attributes reach further)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args)


class _TemplateNamespace(jinja2.utils.Namespace):
    """Jinja's namespace, refusing underscore attributes (the way to CPython's internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        attributes = dict(*rest, **kwargs)
        for name in attributes:
            _check_name(name)
        jinja2.utils.Namespace.__init__(self, attributes)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)


def _check_name(name: object) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(f"a namespace may not hold {name!r}")


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as transformers hands them to a template: None values dropped, and
    reasoning under both `reasoning_content` and `thinking` (gpt-oss templates read that)."""
    shown = []
    for message in messages:
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[key] for key in _REASONING_FIELDS if key in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        shown.append(message)
    return shown


def _environment() -> ImmutableSandboxedEnvironment:
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationBlock, loopcontrols],
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    environment.globals["dict"] = _TemplateDict()
    environment.globals["namespace"] = _TemplateNamespace
    return environment


def thinking_variant(source: str, reasoning_start: str) -> str:
    """`source` plus: when `enable_thinking` is true, the generation prompt ends inside a think block.

    For models whose own template knows nothing of thinking. Jinja drops one trailing newline
    of a template, so it is dropped here too before appending, keeping the output of the
    base template byte for byte.
    """
    base = source[:-1] if source.endswith("\n") else source
    # A JSON string is also a valid Jinja string literal, escapes included.
    opener = "{{ " + json.dumps(reasoning_start + "\n") + " }}"
    condition = "{% if add_generation_prompt and enable_thinking is defined and enable_thinking %}"
    return base + condition + opener + "{% endif %}"


class ChatTemplate:
    def __init__(
        self,
        source: str,
        bos_token: str | None = None,
        eos_token: str | None = None,
        default_kwargs: dict[str, Any] | None = None,
        thinking_switch: ThinkingSwitch | None = None,
    ):
        self.source = source
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        self.default_kwargs = dict(default_kwargs or {})
        # How `enable_thinking` reaches this template, where `enable_thinking` is not its
        # own word for it (Granite's `thinking`, Magistral's system prompt).
        self.thinking_switch = thinking_switch
        try:
            self._template = _environment().from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as error:
            raise ValueError(f"the chat template does not parse: {error}") from error

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        enable_thinking: bool | None = None,
        reasoning_effort: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text. Later sources win: defaults, chat_template_kwargs, keyword arguments;
        `enable_thinking` also goes through the template's thinking switch."""
        context: dict[str, Any] = {"bos_token": self.bos_token, "eos_token": self.eos_token}
        context.update(self.default_kwargs)
        context.update(chat_template_kwargs or {})
        context.update(kwargs)
        if enable_thinking is not None:
            context["enable_thinking"] = enable_thinking
            if self.thinking_switch is not None:
                messages = self.thinking_switch.apply(messages, context, enable_thinking)
        if reasoning_effort is not None:
            context["reasoning_effort"] = reasoning_effort
        clashing = _RESERVED & context.keys()
        if clashing:
            raise ChatTemplateError(f"chat template kwargs may not set {sorted(clashing)}")
        # tools and documents are always defined (None when absent), as transformers has them.
        context.update(messages=template_messages(messages), tools=tools, documents=None,
                       add_generation_prompt=add_generation_prompt)
        try:
            return self._template.render(**context)
        except (jinja2.exceptions.TemplateError, TypeError) as error:
            # TypeError: a message shape the template cannot handle (content None, say).
            raise ChatTemplateError(
                f"the chat template rejected the conversation: {error}"
            ) from error
