"""docs/api.md and the request model's field table must say the same thing."""

from __future__ import annotations

import sys
from pathlib import Path

from api.schema.fields import FIELDS
from api.schema.request import ResponsesRequest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from render_api_doc import render  # noqa: E402


def test_doc_is_rendered_from_the_field_table() -> None:
    assert (ROOT / "docs" / "api.md").read_text() == render(), (
        "docs/api.md is stale: run scripts/render_api_doc.py"
    )


def test_every_field_the_model_validates_is_in_the_table() -> None:
    assert set(ResponsesRequest.model_fields) <= set(FIELDS)


def test_every_honored_or_echoed_field_is_validated() -> None:
    taken = {name for name, (treatment, _) in FIELDS.items() if "400" not in treatment.value}
    assert taken <= set(ResponsesRequest.model_fields)
