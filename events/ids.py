"""Identifiers: response ids and the ids of output items, derived so every fold agrees."""

from __future__ import annotations

import secrets


def new_response_id() -> str:
    return f"resp_{secrets.token_hex(16)}"


def item_id(response_id: str, kind: str, output_index: int) -> str:
    """A stable id for the output item at `output_index`.

    Live streams, resumed streams and stored responses all fold the same log, so item ids
    must be a function of the log, never random.
    """
    suffix = response_id.removeprefix("resp_")
    return f"{kind}_{suffix}_{output_index}"


def call_id(response_id: str, index: int) -> str:
    """The `call_id` of a response's `index`-th function call (0, 1, ...). Derived, not
    random, so a worker that resumes a response names the calls as the first one did."""
    suffix = response_id.removeprefix("resp_")
    return f"call_{suffix}_{index}"
