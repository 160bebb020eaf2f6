"""docs/configuration.md is what `python -m cli.configuration_doc` writes from the settings
classes, and every setting of those classes has a row."""

from __future__ import annotations

import pytest

from api.settings import ApiSettings
from cli.configuration_doc import COMMAND, PAGE, SOURCES, Row, env_name, render, settings_rows
from tests.test_configuration_bounds import configuration_rows


def test_the_page_is_what_the_settings_write() -> None:
    assert PAGE.read_text() == render(), f"docs/configuration.md is stale: run {COMMAND}"


def test_every_setting_is_on_the_page() -> None:
    listed = {name for row in configuration_rows() for name in row.variables}
    fields = {env_name(name) for source in SOURCES for name in source.settings.model_fields}
    # SPATE_STORE_POOL_WAIT_S is told of in SPATE_STORE_POOL_SIZE's row.
    assert fields - listed == {"SPATE_STORE_POOL_WAIT_S"}
    assert "SPATE_STORE_POOL_WAIT_S" in next(
        row.meaning for row in configuration_rows() if row.variables == ("SPATE_STORE_POOL_SIZE",))


def test_a_shared_row_shows_each_default_and_a_shared_field_each_process() -> None:
    rows = {row.variables[0]: row for _, section in settings_rows() for row in section}
    assert rows["SPATE_HOST"].markdown().startswith(
        "| `SPATE_HOST`, `SPATE_PORT` | `127.0.0.1`, `8000` | api, serve, compose |")
    assert rows["SPATE_NATS_USER"].markdown().startswith(
        "| `SPATE_NATS_USER`, `SPATE_NATS_PASSWORD` | unset | all |")
    assert rows["SPATE_STORE_URL"].processes == ["api", "serve"]  # ApiSettings and CliSettings
    assert "[docs/store.md](store.md)" in rows["SPATE_STORE_URL"].markdown()


def test_an_undescribed_setting_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    field = ApiSettings.model_fields["max_inflight"]
    monkeypatch.setattr(field, "description", None)
    with pytest.raises(ValueError, match="SPATE_MAX_INFLIGHT .* has no description"):
        settings_rows()


def test_a_bare_bar_in_a_meaning_is_an_error() -> None:
    with pytest.raises(ValueError, match="bare"):
        Row(["SPATE_X"], ["`1`"], ["api"], "this | that").markdown()
    assert "`a|b`" in Row(["SPATE_X"], ["`1`"], ["api"], "`a|b`").markdown()
