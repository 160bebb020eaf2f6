"""Admission: the replica's bound over every key, each key's own, and slots given back
once however often they are released."""

from __future__ import annotations

import pytest

from api.errors import APIError
from api.guards.admission import Admission


def refusal(call: object) -> APIError:
    with pytest.raises(APIError) as refused:
        call()  # type: ignore[operator]
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "1"}
    return refused.value


def test_one_key_at_its_bound_leaves_the_others_room() -> None:
    admission = Admission(max_inflight=10, key_max_open=2)
    held = [admission.admit("alice"), admission.admit("alice")]
    assert "SPATE_KEY_MAX_OPEN" in refusal(lambda: admission.admit("alice")).message
    admission.admit("bob")
    assert admission.inflight == 3
    held[0].release()
    held[0].release()  # a second release gives nothing back twice
    assert admission.inflight == 2
    admission.admit("alice")


def test_the_replica_bound_holds_over_every_key() -> None:
    admission = Admission(max_inflight=2, key_max_open=2)
    admission.admit("alice")
    admission.admit("bob")
    assert "in flight on this server" in refusal(lambda: admission.admit("carol")).message


def test_resumes_have_a_bound_of_their_own() -> None:
    admission = Admission(max_inflight=1, key_max_open=1, key_max_resumes=1)
    admission.admit(None)
    resume = admission.admit_resume(None)  # the open bound is full; resumes are apart
    assert "SPATE_KEY_MAX_RESUMES" in refusal(lambda: admission.admit_resume(None)).message
    resume.release()
    admission.admit_resume(None)
