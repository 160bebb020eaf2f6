"""Settings the `spate` command reads itself, from SPATE_* environment variables, before
it hands over to a process's own settings (api/settings.py, workers/settings.py). Each
field's `description` is its row in docs/configuration.md (`python -m cli.configuration_doc`);
a field named like one of those classes' shares its row."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from cli.log_format import LogFormat

# A level's name in any case (`debug` is `DEBUG`).
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
    BeforeValidator(lambda value: value.upper() if isinstance(value, str) else value),
]

DEFAULT_STORE_DIR = ".spate/store"
# `spate serve` keeps the key that seals reasoning items here when none is configured.
DEFAULT_KEY_FILE = ".spate/encryption.key"


class CliSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPATE_", extra="ignore")

    log_level: LogLevel = Field(default="INFO", description="log level (any case)",
                                json_schema_extra={"processes": "all"})
    log_format: LogFormat = Field(
        default="text",
        description="`text`, or `json`: one JSON object a line (`time`, `level`, `logger`, "
        "`message`, and `response_id` and `trace_id` where the line has them), every line: "
        "the model's load progress, Python warnings and a crash's traceback are records too. "
        "The load shows a progress bar only in a `text` log on a terminal; elsewhere a "
        "record every few seconds",
        json_schema_extra={"processes": "all"})
    # `spate serve` uses this NATS when it is set, and starts an embedded nats-server
    # when it is not; the API and worker read their own (journal/settings.py).
    nats_url: str | None = None
    nats_store_dir: str | None = Field(
        default=None,
        description="JetStream data of the embedded nats-server (`--nats-store-dir`); "
        "`--nats-port` picks its port",
        json_schema_extra={"shown_default": "a temporary folder"})
    # `spate serve --store` uses this store when it is set, and starts an embedded
    # redis-server (its data in `store_dir`) when it is not.
    store_url: str | None = None
    store_dir: str = Field(
        default=DEFAULT_STORE_DIR,
        description="data of the embedded redis-server (`--store-dir`); `--store-port` "
        "picks its port")
