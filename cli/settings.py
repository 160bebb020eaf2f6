"""Settings the `spate` command reads itself, from SPATE_* environment variables, before
it hands over to a process's own settings (api/settings.py, workers/settings.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator
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

    # Every process's log level.
    log_level: LogLevel = "INFO"
    # Every process's log lines: `text`, or `json` (one object per line, with
    # `response_id` and `trace_id` where a line has them).
    log_format: LogFormat = "text"
    # `spate serve` uses this NATS when it is set, and starts an embedded nats-server
    # when it is not; the API and worker read their own (api/settings.py).
    nats_url: str | None = None
    # JetStream data folder of the embedded nats-server; None: a temporary one.
    nats_store_dir: str | None = None
    # `spate serve --store` uses this store when it is set, and starts an embedded
    # redis-server (its data in `store_dir`) when it is not.
    store_url: str | None = None
    store_dir: str = DEFAULT_STORE_DIR
