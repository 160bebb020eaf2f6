"""The items of `input`: messages, function calls and their outputs, and reasoning."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from api.schema.model_base import FieldRejected, StrictModel, tag_by_type
from api.schema.tool_items import TOOL_ITEM_TAGS, TaggedToolItem

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class TextPart(StrictModel):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class InputFilePart(StrictModel):
    """A file, inline: read into text before lowering (api/lowering/input_files.py)."""

    type: Literal["input_file"]
    file_data: str | None = None
    file_url: str | None = None
    file_id: str | None = None
    filename: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    prompt_cache_breakpoint: dict[str, Any] | None = None


class InputImagePart(StrictModel):
    """An image: refused by a model whose card does not list image input."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high", "original"] | None = None
    prompt_cache_breakpoint: dict[str, Any] | None = None


# Part type -> union tag.
PART_TAGS = {"input_text": "Text", "output_text": "Text", "input_file": "InputFile",
             "input_image": "InputImage"}

ContentPart = Annotated[
    Annotated[TextPart, Tag("Text")]
    | Annotated[InputFilePart, Tag("InputFile")]
    | Annotated[InputImagePart, Tag("InputImage")],
    Discriminator(tag_by_type(PART_TAGS)),
]


class MessageItem(StrictModel):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPart]
    id: str | None = None
    status: str | None = None

    def text(self) -> str:
        """The message's text; files were read into text parts and images refused before
        a request is lowered (api/lowering/input_files.py)."""
        if isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            if not isinstance(part, TextPart):
                raise TypeError(f"an unread {part.type} part reached the prompt")
            texts.append(part.text)
        return "".join(texts)


class FunctionCallItem(StrictModel):
    """A call the model made in an earlier turn, sent back so the conversation goes on."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    namespace: str | None = None
    id: str | None = None
    status: ItemStatus | None = None

    def qualified_name(self) -> str:
        """The name as the model writes it: `<namespace>.<name>` inside a namespace."""
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


class OutputText(StrictModel):
    type: Literal["input_text"]
    text: str


class FunctionCallOutputItem(StrictModel):
    """What the client's function returned for a call."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[OutputText]
    name: str | None = None
    namespace: str | None = None
    id: str | None = None
    status: ItemStatus | None = None

    def text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(part.text for part in self.output)


class ReasoningText(StrictModel):
    type: Literal["reasoning_text"]
    text: str


class ReasoningSummary(StrictModel):
    type: Literal["summary_text"]
    text: str


class ReasoningItem(StrictModel):
    """The reasoning of an earlier turn: in plain text, or sealed in `encrypted_content`
    (opened into `content` before lowering, api/lowering/encrypted_content.py)."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[ReasoningSummary] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: ItemStatus | None = None

    def text(self) -> str:
        return "".join(part.text for part in self.content or [])


class CompactionItem(StrictModel):
    """Earlier turns replaced by a summary (api/lowering/compaction.py): opened into a developer
    message before lowering."""

    type: Literal["compaction"]
    encrypted_content: str = Field(min_length=1)
    id: str | None = None
    created_by: str | None = None


# Item type -> union tag.
ITEM_TAGS = {
    "message": "Message",
    "function_call": "FunctionCall",
    "function_call_output": "FunctionCallOutput",
    "reasoning": "Reasoning",
    **TOOL_ITEM_TAGS,
    "compaction": "Compaction",
}


InputItem = Annotated[
    Annotated[MessageItem, Tag("Message")]
    | Annotated[FunctionCallItem, Tag("FunctionCall")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutput")]
    | Annotated[ReasoningItem, Tag("Reasoning")]
    | TaggedToolItem
    | Annotated[CompactionItem, Tag("Compaction")],
    # A message may leave its type out.
    Discriminator(tag_by_type(ITEM_TAGS, missing="message")),
]


class ItemReference(StrictModel):
    """An item of an earlier response or conversation, by id: resolved from the store
    before the request is lowered (api/lowering/history.py)."""

    type: Literal["item_reference"]
    id: str = Field(min_length=1)


# A request's input may also name stored items; a conversation's items may not.
REQUEST_ITEM_TAGS = {**ITEM_TAGS, "item_reference": "ItemReference"}

RequestInputItem = Annotated[
    Annotated[MessageItem, Tag("Message")]
    | Annotated[FunctionCallItem, Tag("FunctionCall")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutput")]
    | Annotated[ReasoningItem, Tag("Reasoning")]
    | TaggedToolItem
    | Annotated[CompactionItem, Tag("Compaction")]
    | Annotated[ItemReference, Tag("ItemReference")],
    Discriminator(tag_by_type(REQUEST_ITEM_TAGS, missing="message")),
]


def refuse_unknown_item_types(
    items: Any, field: str = "input", tags: dict[str, str] = ITEM_TAGS
) -> None:
    """A clear 400 on `input[i].type` (or `<field>[i].type`) for item kinds spate does not
    take (images, files, item references, built-in tool calls...), before the union
    reports a vaguer error."""
    if not isinstance(items, list):
        return
    for index, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else "message"
        if not isinstance(kind, str) or kind not in tags:
            raise FieldRejected(
                f"{field}[{index}].type",
                f"Input items of type '{item.get('type')}' are not supported; spate takes "
                f"{', '.join(tags)} items.",
            )
