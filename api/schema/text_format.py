"""`text` (with its `format`: plain text, any JSON object, or a JSON schema) and vLLM's
`structured_outputs` (a schema, a regex, a choice or an EBNF grammar): what the answer must
match. The worker enforces it by constrained decoding."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from api.schema.model_base import NAME_PATTERN, FieldRejected, StrictModel, tag_by_type


class PlainTextFormat(StrictModel):
    type: Literal["text"]


class JSONObjectFormat(StrictModel):
    type: Literal["json_object"]


class JSONSchemaFormat(StrictModel):
    type: Literal["json_schema"]
    name: str = Field(pattern=NAME_PATTERN)
    # `schema` would shadow a BaseModel attribute, hence the alias.
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


_FORMAT_TAGS = {"text": "Text", "json_object": "JSONObject", "json_schema": "JSONSchema"}


TextFormat = Annotated[
    Annotated[PlainTextFormat, Tag("Text")]
    | Annotated[JSONObjectFormat, Tag("JSONObject")]
    | Annotated[JSONSchemaFormat, Tag("JSONSchema")],
    Discriminator(tag_by_type(_FORMAT_TAGS)),
]


class TextConfig(StrictModel):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_format(cls, body: Any) -> Any:
        fmt = body.get("format") if isinstance(body, dict) else None
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if isinstance(fmt, dict) and (not isinstance(kind, str) or kind not in _FORMAT_TAGS):
            raise FieldRejected(
                "text.format.type",
                f"The text format '{fmt.get('type')}' is not supported; use "
                f"{', '.join(_FORMAT_TAGS)}.",
            )
        return body

    @property
    def wants_json(self) -> bool:
        return isinstance(self.format, (JSONObjectFormat, JSONSchemaFormat))


STRUCTURED_OUTPUT_KINDS = ("json", "regex", "choice", "grammar")


class StructuredOutputs(StrictModel):
    """vLLM's structured_outputs: exactly one of a JSON schema (an object, or its JSON text),
    a regex, a list of choices, or an EBNF grammar."""

    json_schema: dict[str, Any] | str | None = Field(default=None, alias="json")
    regex: str | None = Field(default=None, min_length=1)
    choice: list[str] | None = Field(default=None, min_length=1)
    grammar: str | None = Field(default=None, min_length=1)

    @field_validator("json_schema")
    @classmethod
    def _schema_object(cls, value: dict[str, Any] | str | None) -> dict[str, Any] | None:
        if not isinstance(value, str):
            return value
        try:
            schema = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"the schema is not valid JSON: {error}") from error
        if not isinstance(schema, dict):
            raise ValueError("the schema must be a JSON object")
        return schema

    @model_validator(mode="after")
    def _exactly_one(self) -> StructuredOutputs:
        given = [
            kind
            for kind, value in zip(STRUCTURED_OUTPUT_KINDS, self._values(), strict=True)
            if value is not None
        ]
        if len(given) != 1:
            raise FieldRejected(
                "structured_outputs",
                f"structured_outputs takes exactly one of {', '.join(STRUCTURED_OUTPUT_KINDS)}; "
                f"got {', '.join(given) or 'none'}.",
            )
        return self

    def _values(self) -> tuple[Any, ...]:
        return (self.json_schema, self.regex, self.choice, self.grammar)
