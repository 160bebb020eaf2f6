"""Which NATS a command talks to, and saying so: its `--nats-url`, else SPATE_NATS_URL,
else the NATS of a `spate serve` running from this folder (cli/serve_record.py), else
the default."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from cli.serve_record import SERVE_RECORD, live_serve_record
from journal import JournalSettings, JournalUnavailable
from journal.connection import redacted, server_urls

DEFAULT_NATS_URL: str = JournalSettings.model_fields["nats_url"].default

log = logging.getLogger("spate.cli")


@dataclass(frozen=True, slots=True)
class NatsAddress:
    url: str
    # Where the URL came from, said in the log line that names it.
    source: str

    def unreachable(self, error: JournalUnavailable) -> str:
        """The one line a command that gives up on NATS logs."""
        return f"{error}; the URL came from {self.source}"


def nats_address(flag: str | None, settings: JournalSettings, path: Path = SERVE_RECORD) -> NatsAddress:
    """The NATS a command uses: its `--nats-url`, else SPATE_NATS_URL, else the one a
    `spate serve` running from this folder recorded, else the default."""
    if flag:
        return NatsAddress(flag, "--nats-url")
    if "nats_url" in settings.model_fields_set:
        return NatsAddress(settings.nats_url, "SPATE_NATS_URL")
    record = live_serve_record(path)
    if record is not None:
        return NatsAddress(record.nats_url, f"spate serve (pid {record.pid}) recorded in {path}")
    return NatsAddress(DEFAULT_NATS_URL, f"the default: no --nats-url, no SPATE_NATS_URL, "
                                         f"no running spate serve recorded in {path.absolute()}")


def where(nats_url: str) -> str:
    """The servers of a NATS URL as a log line may show them (no credentials)."""
    return ",".join(redacted(url) for url in server_urls(nats_url))


def use_nats_address(settings: JournalSettings, flag: str | None, path: Path = SERVE_RECORD) -> NatsAddress:
    """Find the command's NATS (`nats_address`), point `settings` at it and say which
    one it took in one log line."""
    address = nats_address(flag, settings, path)
    settings.nats_url = address.url
    log.info("NATS at %s (from %s)", where(address.url), address.source)
    return address

