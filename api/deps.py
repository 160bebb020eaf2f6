"""Typed dependencies: handlers get the lifespan's objects (api/state.py's ApiState) through
these, never globals.

Every dependency is `async def` though none awaits anything: FastAPI runs a plain `def`
dependency on a worker thread, and the nine a create resolves cost it about a millisecond of
thread hops before its first line (its first token, at one stream)."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from api.errors import APIError
from api.guards.admission import Admission
from api.guards.drain import Drain
from api.guards.owner import key_owner
from api.lowering.encrypted_content import ContentKeys
from api.metrics import ApiMetrics
from api.settings import ApiSettings
from api.state import api_state
from journal import Journal
from store import Store


async def get_settings(request: Request) -> ApiSettings:
    return api_state(request).settings


async def get_journal(request: Request) -> Journal:
    return api_state(request).journal


async def get_admission(request: Request) -> Admission:
    return api_state(request).admission


async def get_metrics(request: Request) -> ApiMetrics:
    return api_state(request).metrics


async def get_drain(request: Request) -> Drain:
    return api_state(request).drain


async def get_content_keys(request: Request) -> ContentKeys:
    return api_state(request).content_keys


async def get_store(request: Request) -> Store | None:
    """The response store; None with it off (SPATE_STORE_URL unset)."""
    return api_state(request).store


async def require_api_key(request: HTTPConnection) -> None:
    """`check_api_key` as a dependency."""
    check_api_key(request)


def check_api_key(request: HTTPConnection) -> None:
    """A 401 unless API keys are off or the request (or WebSocket upgrade) presents one."""
    keys = api_state(request).settings.api_key_set
    if not keys:
        return
    if _presented_key(request) is None:
        raise APIError(401, "Invalid or missing API key.", code="invalid_api_key")


def _presented_key(request: HTTPConnection) -> str | None:
    """The request's bearer key when it is one of the configured keys; compared in
    constant time, so a probe learns nothing from how long a wrong key takes."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    found = None
    for key in api_state(request).settings.api_key_set:
        if hmac.compare_digest(key.encode(), token.encode()):
            found = key
    return found


# The one owner of everything when keys are off: every client is the same tenant.
SHARED_OWNER = "shared"


async def get_owner(request: HTTPConnection) -> str:
    """`owner_of` as a dependency."""
    return owner_of(request)


def owner_of(request: HTTPConnection) -> str:
    """Who a request acts for (the tenant): a digest of the API key (the key itself is
    never stored or published), or SHARED_OWNER when keys are off. It scopes what a
    client can name or reach: stored responses, conversations and items, and the
    worker's prefix cache (docs/api.md, "Tenancy")."""
    key = _presented_key(request)
    return SHARED_OWNER if key is None else key_owner(key)


SettingsDep = Annotated[ApiSettings, Depends(get_settings)]
JournalDep = Annotated[Journal, Depends(get_journal)]
OwnerDep = Annotated[str, Depends(get_owner)]
AdmissionDep = Annotated[Admission, Depends(get_admission)]
MetricsDep = Annotated[ApiMetrics, Depends(get_metrics)]
DrainDep = Annotated[Drain, Depends(get_drain)]
ContentKeysDep = Annotated[ContentKeys, Depends(get_content_keys)]
StoreDep = Annotated[Store | None, Depends(get_store)]
