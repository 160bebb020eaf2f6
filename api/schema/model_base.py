"""The base of every request model (strict types, unknown keys refused) and the exception
that refuses a field by name before pydantic validates it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

# OpenAI's rule for function, namespace and response-format names.
NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


class FieldRejected(Exception):
    """Raised from validators; not a ValueError, so pydantic lets it through untouched and
    the API answers a 400 whose `param` is exactly `param`."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def tag_by_type(tags: dict[str, str], missing: str | None = None) -> Callable[[Any], str | None]:
    """A union discriminator reading the `type` key (`missing` stands in for an absent one).
    Tags are capitalized: error paths name the union branch, and api.errors.param_path
    skips capitalized parts, so `param` stays the client's own path."""

    def tag(value: Any) -> str | None:
        if isinstance(value, dict):
            kind = value.get("type", missing)
        else:
            kind = getattr(value, "type", None)
        return tags.get(kind) if isinstance(kind, str) else None

    return tag
