"""/openapi.json with the request bodies in it.

The routes read their JSON bodies themselves (api/schema/body.py: size limit, depth limit, an
OpenAI-shaped 400), so FastAPI cannot see them; this adds each body's schema, generated
from its pydantic model, to the document. The Responses body also lists the fields the
server refuses (api/schema/fields.py), at the one value it accepts for them.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from api.schema.conversation import ConversationCreate, ConversationUpdate, ItemsCreate
from api.schema.fields import FIELDS, OFF_VALUES, Treatment
from api.schema.request import ResponsesRequest

REF_TEMPLATE = "#/components/schemas/{model}"

# (path, method) -> the model its body is read as.
BODIES: dict[tuple[str, str], type[BaseModel]] = {
    ("/v1/responses", "post"): ResponsesRequest,
    ("/v1/responses/input_tokens", "post"): ResponsesRequest,
    ("/v1/conversations", "post"): ConversationCreate,
    ("/v1/conversations/{conversation_id}", "post"): ConversationUpdate,
    ("/v1/conversations/{conversation_id}/items", "post"): ItemsCreate,
}


def body_schema(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's JSON schema and the definitions it refers to."""
    schema = model.model_json_schema(ref_template=REF_TEMPLATE)
    definitions = schema.pop("$defs", {})
    if model is ResponsesRequest:
        properties = schema["properties"]
        for name, (treatment, note) in FIELDS.items():
            if name in properties or treatment is not Treatment.REJECTED:
                continue
            off = OFF_VALUES.get(name)
            properties[name] = {"description": f"{note}; only {json.dumps(off)} is accepted",
                                "const": off}
    return schema, definitions


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        document = get_openapi(title=app.title, version=app.version, routes=app.routes)
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for (path, method), model in BODIES.items():
            operation = document["paths"].get(path, {}).get(method)
            if operation is None:
                continue
            schema, definitions = body_schema(model)
            schemas.update(definitions)
            schemas[model.__name__] = schema
            operation["requestBody"] = {"required": True, "content": {"application/json": {
                "schema": {"$ref": REF_TEMPLATE.format(model=model.__name__)}}}}
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
