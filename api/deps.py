"""Typed dependencies: handlers get the lifespan's objects through these, never globals."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.admission import Admission
from api.bus import Bus
from api.errors import APIError
from api.settings import ApiSettings


# app.state is untyped; these are where its objects get their types back.
def get_settings(request: Request) -> ApiSettings:
    settings: ApiSettings = request.app.state.settings
    return settings


def get_bus(request: Request) -> Bus:
    bus: Bus = request.app.state.bus
    return bus


def get_admission(request: Request) -> Admission:
    admission: Admission = request.app.state.admission
    return admission


def require_api_key(request: Request) -> None:
    keys = request.app.state.settings.api_key_set
    if not keys:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or token.strip() not in keys:
        raise APIError(401, "Invalid or missing API key.", code="invalid_api_key")


SettingsDep = Annotated[ApiSettings, Depends(get_settings)]
BusDep = Annotated[Bus, Depends(get_bus)]
AdmissionDep = Annotated[Admission, Depends(get_admission)]
