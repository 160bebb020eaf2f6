"""`spate serve` records where its NATS listens (.spate/serve.json) and the observe
commands find it there when no flag or SPATE_NATS_URL names one; a command that cannot
reach NATS says so in one line and exits non-zero once its bounded wait is over."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.nats_address import DEFAULT_NATS_URL, nats_address
from cli.nats_server import EmbeddedNats, free_port
from cli.serve_record import (
    SERVE_RECORD,
    live_serve_record,
    remove_serve_record,
    write_serve_record,
)
from journal import JournalSettings
from tests.journal.conftest import connect
from tests.journal.test_tail import write_response
from tests.processes import ROOT


def ended_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def run_python(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python ARGS` as a user runs it from `cwd`, with no SPATE_NATS_URL unless given."""
    environment = {key: value for key, value in os.environ.items() if key != "SPATE_NATS_URL"}
    environment["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=environment | env,
                          capture_output=True, text=True, timeout=120)


def spate(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_python(["-m", "cli.main", *args], cwd, **env)


def test_a_record_names_its_serve_until_that_serve_removes_it(tmp_path: Path) -> None:
    path = tmp_path / SERVE_RECORD
    written = write_serve_record("nats://127.0.0.1:4567", "http://127.0.0.1:8000", path)
    assert written.pid == os.getpid()
    assert live_serve_record(path) == written
    remove_serve_record(path)
    assert not path.exists() and live_serve_record(path) is None


def test_a_killed_serves_record_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPATE_NATS_URL", raising=False)
    path = tmp_path / SERVE_RECORD
    write_serve_record("nats://127.0.0.1:4567", "http://127.0.0.1:8000", path)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "pid": ended_pid()}))
    assert live_serve_record(path) is None
    address = nats_address(None, JournalSettings(), path)
    assert address.url == DEFAULT_NATS_URL and address.source.startswith("the default")


def test_a_serve_leaves_a_later_serves_record_alone(tmp_path: Path) -> None:
    """Two serves started from one folder: the first to stop does not remove the record
    the second wrote over its own."""
    path = tmp_path / SERVE_RECORD
    write_serve_record("nats://127.0.0.1:4567", "http://127.0.0.1:8000", path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = json.loads(path.read_text())
        path.write_text(json.dumps({**record, "pid": other.pid}))
        remove_serve_record(path)
        live = live_serve_record(path)
        assert live is not None and live.pid == other.pid
    finally:
        other.kill()
        other.wait()


def test_a_flag_or_the_variable_wins_over_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / SERVE_RECORD
    write_serve_record("nats://127.0.0.1:4567", "http://127.0.0.1:8000", path)
    monkeypatch.delenv("SPATE_NATS_URL", raising=False)
    recorded = nats_address(None, JournalSettings(), path)
    assert recorded.url == "nats://127.0.0.1:4567"
    assert f"pid {os.getpid()}" in recorded.source and str(path) in recorded.source
    assert nats_address("nats://flag:1", JournalSettings(), path).source == "--nats-url"
    monkeypatch.setenv("SPATE_NATS_URL", "nats://variable:1")
    from_variable = nats_address(None, JournalSettings(), path)
    assert (from_variable.url, from_variable.source) == ("nats://variable:1", "SPATE_NATS_URL")
    assert nats_address("nats://flag:1", JournalSettings(), path).url == "nats://flag:1"


async def test_events_tail_finds_the_recorded_nats_with_no_flags(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    """The record a serve in `tmp_path` would write, naming the session's real
    nats-server: `spate events tail` run there with no flag and no variable reads it."""
    write_serve_record(nats_server.url, "http://127.0.0.1:8000", tmp_path / SERVE_RECORD)
    journal = await connect(nats_server.url)
    try:
        await write_response(journal, "resp_found_by_record")
    finally:
        await journal.close()
    tail = await asyncio.to_thread(
        spate, ["events", "tail", "--response", "resp_found_by_record", "--json"], tmp_path)
    assert tail.returncode == 0, tail.stderr
    assert [json.loads(line)["seq"] for line in tail.stdout.splitlines()] == [0, 1, 2, 3]
    assert f"NATS at {nats_server.url} (from spate serve (pid {os.getpid()})" in tail.stderr


@pytest.mark.parametrize(("command", "log_format"), [
    (["-m", "cli.main", "events", "tail", "--connect-wait", "1"], "text"),
    (["-m", "cli.main", "events", "tail"], "json"),
    (["-m", "examples.usage_meter"], "text"),
    (["-m", "cli.main", "worker"], "json"),
])
def test_unreachable_nats_is_one_line_and_a_non_zero_exit(
    tmp_path: Path, command: list[str], log_format: str
) -> None:
    """The wait is bounded by SPATE_NATS_CONNECT_WAIT_S, or `events tail --connect-wait`."""
    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    done = run_python(command, tmp_path, SPATE_NATS_URL=url, SPATE_LOG_FORMAT=log_format,
                      SPATE_NATS_CONNECT_WAIT_S="1")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    if log_format == "json":
        lines = [json.loads(line)["level"] + " " + json.loads(line)["message"] for line in lines]
    problems = [line for line in lines if "WARNING" in line or "ERROR" in line]
    assert len(problems) == 1, lines
    assert f"cannot reach NATS at {url} within 1 s" in problems[0]
    assert problems[0].endswith("the URL came from SPATE_NATS_URL")
    assert done.stdout == ""


def test_the_default_says_where_no_serve_was_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No flag, no variable, no record: the default, named as such, with the file where
    a serve's record was looked for."""
    monkeypatch.delenv("SPATE_NATS_URL", raising=False)
    address = nats_address(None, JournalSettings(), tmp_path / SERVE_RECORD)
    assert address.url == DEFAULT_NATS_URL
    assert str(tmp_path / SERVE_RECORD) in address.source
