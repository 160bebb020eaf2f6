"""docs/api.md and the request model's field table must say the same thing."""

from __future__ import annotations

import re
from pathlib import Path

from api.fields import FIELDS
from api.request_model import ResponsesRequest

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ROW = re.compile(r"^\| `([a-z_]+)` \| ([^|]+) \| ([^|]*) \|$")


def documented() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = (match.group(2).strip(), match.group(3).strip())
    return rows


def test_doc_lists_every_field_with_its_treatment() -> None:
    expected = {name: (treatment.value, note) for name, (treatment, note) in FIELDS.items()}
    assert documented() == expected


def test_every_field_the_model_validates_is_in_the_table() -> None:
    assert set(ResponsesRequest.model_fields) <= set(FIELDS)
