"""How every spate process writes its log: plain text lines, or (`SPATE_LOG_FORMAT=json`)
one JSON object per line with the response id and trace id where a line has them."""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Attributes a log call may attach with `extra=`; written when set.
CONTEXT_FIELDS = ("response_id", "trace_id")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure_logging(level: str, log_format: LogFormat) -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        # A crash's traceback, in the main thread or another, is one record too.
        sys.excepthook = _log_uncaught
        threading.excepthook = lambda uncaught: _log_uncaught(
            uncaught.exc_type, uncaught.exc_value or uncaught.exc_type(), uncaught.exc_traceback)
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Python's warnings (a library's DeprecationWarning, ...) become log records in the
    # same format, not lines of their own on stderr.
    logging.captureWarnings(True)


def logs_json() -> bool:
    """Whether this process writes its log as JSON (configure_logging was told so)."""
    return any(isinstance(handler.formatter, JsonFormatter) for handler in logging.getLogger().handlers)


def _log_uncaught(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    logging.getLogger("spate").critical("uncaught %s", kind.__name__, exc_info=(kind, error, trace))
