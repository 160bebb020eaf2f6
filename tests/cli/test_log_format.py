"""SPATE_LOG_FORMAT=json: one JSON object a line, with the response and trace ids a line
has; SPATE_LOG_LEVEL in any case; a setting out of range said in one line."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from cli.log_format import JsonFormatter
from cli.settings import CliSettings
from journal.trace_context import trace_id_of, valid_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def record(**extra: object) -> logging.LogRecord:
    made = logging.LogRecord("spate.worker", logging.INFO, __file__, 1, "took %s", ("resp_1",), None)
    for name, value in extra.items():
        setattr(made, name, value)
    return made


def test_a_line_is_one_json_object() -> None:
    line = JsonFormatter().format(record(response_id="resp_1", trace_id=TRACE))
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "took resp_1"
    assert (parsed["level"], parsed["logger"]) == ("INFO", "spate.worker")
    assert (parsed["response_id"], parsed["trace_id"]) == ("resp_1", TRACE)


def test_fields_a_line_does_not_have_are_left_out() -> None:
    parsed = json.loads(JsonFormatter().format(record(trace_id=None)))
    assert "response_id" not in parsed and "trace_id" not in parsed


def test_an_exception_stays_on_its_line() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        import sys

        made = record()
        made.exc_info = sys.exc_info()
    line = JsonFormatter().format(made)
    assert "\n" not in line and "ValueError" in json.loads(line)["exception"]


def test_traceparent_parsing() -> None:
    assert trace_id_of(f"00-{TRACE}-{PARENT}-01") == TRACE
    assert valid_traceparent(f" 00-{TRACE.upper()}-{PARENT}-01 ") == f"00-{TRACE}-{PARENT}-01"
    for bad in (None, "", "00-abc-def-01", f"ff-{TRACE}-{PARENT}-01",
                f"00-{'0' * 32}-{PARENT}-01", f"00-{TRACE}-{'0' * 16}-01"):
        assert trace_id_of(bad) is None, bad


def test_a_log_level_is_read_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPATE_LOG_LEVEL", "debug")
    assert CliSettings().log_level == "DEBUG"


def test_an_invalid_setting_is_one_line_naming_it() -> None:
    """The real command, as a user runs it: exit status 2 and the variable's name, no
    traceback."""
    done = subprocess.run([sys.executable, "-m", "cli.main", "api"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "SPATE_PORT": "70000"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("spate: invalid setting: SPATE_PORT:"), done.stderr
    assert "Traceback" not in done.stderr


def test_warnings_and_a_crash_are_json_lines_too() -> None:
    """What would print past the log (a Python warning, an uncaught exception's
    traceback) comes out as records of the JSON log."""
    program = ("from cli.log_format import configure_logging\n"
               "configure_logging('INFO', 'json')\n"
               "import warnings\n"
               "warnings.warn('an old way', DeprecationWarning, stacklevel=1)\n"
               "raise ValueError('boom')\n")
    done = subprocess.run([sys.executable, "-W", "always", "-c", program], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [line["logger"] for line in lines] == ["py.warnings", "spate"], lines
    assert "an old way" in lines[0]["message"]
    assert lines[1]["level"] == "CRITICAL" and "ValueError: boom" in lines[1]["exception"]


def test_an_invalid_setting_is_one_json_line_in_json_mode() -> None:
    done = subprocess.run([sys.executable, "-m", "cli.main", "api"], capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "SPATE_PORT": "70000", "SPATE_LOG_FORMAT": "json"})
    assert done.returncode == 2, done.stderr
    (line,) = [json.loads(line) for line in done.stderr.splitlines()]
    assert line["message"].startswith("invalid setting: SPATE_PORT:"), line
