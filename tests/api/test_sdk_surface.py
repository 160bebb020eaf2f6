"""The request surface of the installed official SDK, read from its own types: every
field it defines for POST /v1/responses has a treatment in api/schema/fields.py, every option
object's keys and every literal's values are taken. A new SDK release that adds one fails
here, naming it, until it is given a treatment."""

from __future__ import annotations

import typing
from typing import Any, Literal, get_args, get_origin

import pytest
from openai.types.responses import response_create_params as sdk
from openai.types.responses.response_includable import ResponseIncludable
from openai.types.shared_params.reasoning import Reasoning
from pydantic import BaseModel

from api.schema.fields import FIELDS
from api.schema.options import AccessPrograms, BackgroundOptions, ImageOptions, StreamOptions
from api.schema.request import (
    INCLUDABLE,
    INCLUDABLE_ABSENT,
    PromptCacheOptions,
    ReasoningConfig,
    ResponsesRequest,
)

# Fields real clients send that the SDK does not define (Codex CLI).
CLIENT_FIELDS = {"client_metadata"}


def sdk_request_fields() -> set[str]:
    return set(sdk.ResponseCreateParamsStreaming.__annotations__) | set(
        sdk.ResponseCreateParamsNonStreaming.__annotations__
    )


def literal_values(annotation: Any) -> set[Any]:
    """Every literal value anywhere inside an annotation (through Optional and Union)."""
    if get_origin(annotation) is Literal:
        return set(get_args(annotation))
    values: set[Any] = set()
    for argument in get_args(annotation):
        values |= literal_values(argument)
    return values


def test_every_sdk_field_has_a_treatment() -> None:
    untreated = sorted(sdk_request_fields() - set(FIELDS))
    assert not untreated, f"the SDK defines fields api/schema/fields.py does not treat: {untreated}"


def test_fields_real_clients_send_have_a_treatment() -> None:
    assert CLIENT_FIELDS <= set(FIELDS)
    assert CLIENT_FIELDS <= set(ResponsesRequest.model_fields)


# SDK option object -> the model that validates it here.
OPTION_OBJECTS: list[tuple[Any, type[BaseModel]]] = [
    (Reasoning, ReasoningConfig),
    (sdk.PromptCacheOptions, PromptCacheOptions),
    (sdk.StreamOptions, StreamOptions),
    (sdk.BackgroundOptions, BackgroundOptions),
    (sdk.Image, ImageOptions),
    (sdk.AccessPrograms, AccessPrograms),
]


@pytest.mark.parametrize(("sdk_type", "model"), OPTION_OBJECTS,
                         ids=[model.__name__ for _, model in OPTION_OBJECTS])
def test_every_key_of_an_option_object_is_known(sdk_type: Any, model: type[BaseModel]) -> None:
    assert set(sdk_type.__annotations__) <= set(model.model_fields), (
        sorted(set(sdk_type.__annotations__) - set(model.model_fields))
    )


@pytest.mark.parametrize(("sdk_type", "model"), OPTION_OBJECTS,
                         ids=[model.__name__ for _, model in OPTION_OBJECTS])
def test_every_literal_value_of_an_option_object_is_taken(
    sdk_type: Any, model: type[BaseModel]
) -> None:
    """Each value validates, or is refused with a reason api/schema/fields.py documents (the
    Daybreak access programs, a prewarm that would generate nothing)."""
    refused = {("AccessPrograms", "cyber"), ("PromptCacheOptions", "prewarm")}
    hints = typing.get_type_hints(sdk_type)
    for key, annotation in hints.items():
        for value in literal_values(annotation):
            if (model.__name__, key) in refused:
                continue
            model.model_validate({key: value})


def test_every_top_level_literal_is_taken() -> None:
    hints = typing.get_type_hints(sdk.ResponseCreateParamsNonStreaming)
    for name in ("service_tier", "truncation", "prompt_cache_retention"):
        for value in literal_values(hints[name]):
            ResponsesRequest.model_validate({"model": "m", "input": "hi", name: value})


def test_every_includable_is_taken() -> None:
    assert set(get_args(ResponseIncludable)) <= set(INCLUDABLE) | set(INCLUDABLE_ABSENT)
    ResponsesRequest.model_validate(
        {"model": "m", "input": "hi", "include": list(get_args(ResponseIncludable))}
    )


def test_a_key_the_sdk_does_not_define_is_still_a_400() -> None:
    from api.schema.model_base import FieldRejected

    with pytest.raises(FieldRejected) as refused:
        ResponsesRequest.model_validate({"model": "m", "input": "hi", "not_a_field": 1})
    assert refused.value.param == "not_a_field"


def test_every_tool_type_has_a_treatment() -> None:
    from openai.types.responses.tool_param import ToolParam

    from api.schema.tools import SERVED_TOOL_TYPES

    sdk_types = set()
    for member in get_args(ToolParam):
        sdk_types |= literal_values(typing.get_type_hints(member)["type"])
    assert sdk_types - {"function"} and sdk_types <= set(SERVED_TOOL_TYPES), (
        sorted(sdk_types - set(SERVED_TOOL_TYPES)))
    for tool_type in sorted(sdk_types):
        body = {"type": tool_type, "name": "t", "description": "d", "tools": [
            {"type": "function", "name": "f"}]} if tool_type == "namespace" else (
            {"type": tool_type, "name": "t"} if tool_type in ("function", "custom") else
            {"type": tool_type})
        ResponsesRequest.model_validate({"model": "m", "input": "hi", "tools": [body]})


def test_every_input_item_of_a_client_tool_is_taken() -> None:
    from openai.types.responses import response_input_item_param as items

    from api.schema.input_items import ITEM_TAGS

    sdk_types = set()
    for name in ("ResponseCustomToolCallParam", "ResponseCustomToolCallOutputParam",
                 "LocalShellCall", "LocalShellCallOutput", "ShellCall", "ShellCallOutput",
                 "ApplyPatchCall", "ApplyPatchCallOutput"):
        sdk_types |= literal_values(typing.get_type_hints(getattr(items, name))["type"])
    assert sdk_types <= set(ITEM_TAGS), sorted(sdk_types - set(ITEM_TAGS))
