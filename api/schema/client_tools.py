"""Tools the model calls and the client runs, beside functions: `custom` tools (free text,
or input held to a Lark or regex grammar) and the built-ins whose schema OpenAI fixes
(`local_shell`, `shell`, `apply_patch`). Each is offered to the model and comes back as
its own item type (events/builtin_tools.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag

from api.schema.model_base import NAME_PATTERN, StrictModel, tag_by_type

Caller = Literal["direct", "programmatic"]


class TextInput(StrictModel):
    type: Literal["text"]


class GrammarInput(StrictModel):
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    # Bounded with the other grammars (api/guards/limits.py).
    definition: str = Field(min_length=1)


CustomInputFormat = Annotated[
    Annotated[TextInput, Tag("Text")] | Annotated[GrammarInput, Tag("Grammar")],
    Discriminator(tag_by_type({"text": "Text", "grammar": "Grammar"})),
]


class CustomTool(StrictModel):
    """A tool whose input is text the model writes, not a JSON object."""

    model_config = ConfigDict(populate_by_name=True)

    type: Literal["custom"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    format: CustomInputFormat | None = None
    # No-ops, as on functions: every tool is called directly and offered up front.
    allowed_callers: list[Caller] | None = None
    defer_loading: bool | None = None
    async_: bool | None = Field(default=None, alias="async")


class LocalShellTool(StrictModel):
    type: Literal["local_shell"]


class ShellTool(StrictModel):
    """The shell tool the client runs. A container environment would be OpenAI's to run,
    so only the local one (or none) is taken."""

    type: Literal["shell"]
    allowed_callers: list[Caller] | None = None
    environment: dict[str, Any] | None = None


class ApplyPatchTool(StrictModel):
    type: Literal["apply_patch"]
    allowed_callers: list[Caller] | None = None


CLIENT_TOOL_TAGS = {"custom": "Custom", "local_shell": "LocalShell", "shell": "Shell",
                    "apply_patch": "ApplyPatch"}
ClientTool = (
    Annotated[CustomTool, Tag("Custom")] | Annotated[LocalShellTool, Tag("LocalShell")]
    | Annotated[ShellTool, Tag("Shell")] | Annotated[ApplyPatchTool, Tag("ApplyPatch")]
)


def runs_on_server(tool: ShellTool) -> bool:
    """A shell in a container (`container_auto`, `container_reference`) is OpenAI's to run."""
    return (tool.environment or {}).get("type", "local") not in ("local",)
