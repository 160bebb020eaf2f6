"""Property tests of validation and normalization: whatever JSON a client sends, the
request model either refuses it in a way the API turns into a 400 naming a field, or
takes it, and then `accept` builds a request event that survives the wire unchanged.
Nothing else (no TypeError, no OverflowError, no event the worker would refuse)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from api.errors import validation_error
from api.lowering.accept import accept
from api.schema.fields import FIELDS
from api.schema.request import FieldRejected, ResponsesRequest
from events import RequestAccepted, decode, encode

# JSON leaves, with numbers at and around every bound the request settings define.
EDGE_INTS = [-(2**63) - 1, -(2**63), -1001, -1000, -2, -1, 0, 1, 2, 20, 21, 1 << 20,
             (1 << 20) + 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 10**30]
EDGE_FLOATS = [-2.01, -2.0, -0.0, 0.0, 1e-9, 0.5, 1.0, 1.01, 2.0, 2.01, 10.0, 10.01, 1e308]
leaves = st.one_of(
    st.none(), st.booleans(), st.sampled_from(EDGE_INTS), st.integers(),
    st.sampled_from(EDGE_FLOATS), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8), st.sampled_from(["user", "assistant", "system", "message",
                                          "input_text", "function", "auto", "none", ""]),
)
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "developer"]),
     "content": st.one_of(st.text(max_size=10), json_values)},
    optional={"type": st.sampled_from(["message", "function_call", "reasoning", "x"])},
)
bodies = st.fixed_dictionaries(
    {"model": st.one_of(st.just("m"), json_values),
     "input": st.one_of(st.text(min_size=1, max_size=10), st.lists(message, max_size=3),
                        json_values)},
    optional={name: json_values for name in FIELDS if name not in ("model", "input")},
)


def check(body: Any) -> None:
    try:
        request = ResponsesRequest.model_validate(body)
    except FieldRejected as refused:
        # It names the field: a known one, or the unknown key the client sent.
        top = refused.param.split(".")[0].split("[")[0]
        assert refused.message
        assert top == "" or top in FIELDS or (isinstance(body, dict) and refused.param in body)
        return
    except ValidationError as error:
        refusal = validation_error(error)
        assert refusal.status == 400 and refusal.message
        return
    event = accept(request, "resp_fuzz", owner="shared")
    assert isinstance(event, RequestAccepted)
    assert decode(encode(event)) == event


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=bodies)
def test_any_body_is_refused_cleanly_or_becomes_a_valid_event(body: dict[str, Any]) -> None:
    check(body)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=json_values)
def test_any_json_value_as_a_body_is_refused_cleanly(body: Any) -> None:
    check(body)
