"""The API's settings: the response store is off unless SPATE_STORE_URL names one."""

import pytest

from api.settings import ApiSettings
from store.base import DEFAULT_TTL_S


def test_the_store_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPATE_STORE_URL", raising=False)
    monkeypatch.delenv("SPATE_STORE_TTL_S", raising=False)
    settings = ApiSettings()
    assert settings.store_url is None
    assert settings.store_ttl_s == DEFAULT_TTL_S == 30 * 24 * 3600


def test_an_empty_store_url_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPATE_STORE_URL", " ")
    assert ApiSettings().store_url is None


def test_the_store_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPATE_STORE_URL", "redis://store:6379/2")
    monkeypatch.setenv("SPATE_STORE_TTL_S", "60")
    settings = ApiSettings()
    assert (settings.store_url, settings.store_ttl_s) == ("redis://store:6379/2", 60)
