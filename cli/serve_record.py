"""Where a running `spate serve` listens, kept in its state folder (`.spate/serve.json`
in the folder it was started from) while it runs, so that `spate events tail`, the usage
meter and a standalone API, worker or store started beside it find its NATS without
flags. The serve that wrote it removes it when it stops; one left by a serve that was
killed names a process that no longer runs and is ignored."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

SERVE_RECORD = Path(".spate") / "serve.json"

log = logging.getLogger("spate.cli")


class ServeRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    pid: int
    nats_url: str
    api_url: str
    started_at: float


def write_serve_record(nats_url: str, api_url: str, path: Path = SERVE_RECORD) -> ServeRecord:
    """Record this process as the running serve (replacing one a killed serve left)."""
    record = ServeRecord(pid=os.getpid(), nats_url=nats_url, api_url=api_url,
                         started_at=time.time())
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written aside and renamed: a reader never sees half a file.
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(record.model_dump_json() + "\n")
    partial.replace(path)
    return record


def remove_serve_record(path: Path = SERVE_RECORD) -> None:
    """Remove the record if it is this process's: a serve started later in the same
    folder replaced it with its own, which stays while that one runs."""
    record = read_serve_record(path)
    if record is not None and record.pid == os.getpid():
        path.unlink(missing_ok=True)


def read_serve_record(path: Path = SERVE_RECORD) -> ServeRecord | None:
    """The record at `path`, whatever its process's state; None when there is none or
    it cannot be read."""
    try:
        return ServeRecord.model_validate(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, ValidationError) as error:
        log.warning("ignoring %s: %s", path, error)
        return None


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process, but a running one
        return True
    return True


def live_serve_record(path: Path = SERVE_RECORD) -> ServeRecord | None:
    """The record of a serve that still runs; None when none was recorded or it stopped
    without removing its record (killed)."""
    record = read_serve_record(path)
    if record is None:
        return None
    if not running(record.pid):
        log.debug("ignoring %s: spate serve (pid %d) no longer runs", path, record.pid)
        return None
    return record
