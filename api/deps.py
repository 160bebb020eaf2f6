"""Typed dependencies: handlers get the lifespan's objects through these, never globals."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.admission import Admission
from api.errors import APIError
from api.settings import ApiSettings
from journal import Journal


def get_settings(request: Request) -> ApiSettings:
    return request.app.state.settings


def get_journal(request: Request) -> Journal:
    return request.app.state.journal


def get_admission(request: Request) -> Admission:
    return request.app.state.admission


def require_api_key(request: Request) -> None:
    keys = request.app.state.settings.api_key_set
    if not keys:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or token.strip() not in keys:
        raise APIError(401, "Invalid or missing API key.", code="invalid_api_key")


SettingsDep = Annotated[ApiSettings, Depends(get_settings)]
JournalDep = Annotated[Journal, Depends(get_journal)]
AdmissionDep = Annotated[Admission, Depends(get_admission)]
