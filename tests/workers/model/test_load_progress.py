"""A model's load shows a bar only where a person reads a plain-text log on a terminal;
elsewhere (a file, a pipe, JSON logs) it is a few log records, never carriage returns."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator

import pytest

from cli.log_format import JsonFormatter
from workers.model.load_progress import load_progress


@pytest.fixture
def root_handler() -> Iterator[list[logging.Handler]]:
    """The root logger's handlers, given back as they were after the test."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    root.setLevel(logging.INFO)
    try:
        yield root.handlers
    finally:
        root.handlers[:] = saved
        root.setLevel(level)


def test_json_logs_get_records_and_no_bar(root_handler: list[logging.Handler],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(JsonFormatter())
    root_handler[:] = [handler]
    assert list(load_progress(list(range(50)), "tiny", every_s=0.0)) == list(range(50))
    lines = written.getvalue().splitlines()
    assert "\r" not in written.getvalue() and capsys.readouterr().err == ""
    messages = [json.loads(line)["message"] for line in lines]
    assert messages[0] == "loading tiny: 50 tensors"
    assert messages[-1].startswith("loaded tiny: 50 tensors in ")
    assert "loading tiny: 25/50 tensors (50%)" in messages  # every_s=0: a record a tensor


def test_a_text_log_on_a_terminal_gets_the_bar(root_handler: list[logging.Handler],
                                                capfd: pytest.CaptureFixture[str]) -> None:
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as terminal:
        handler = logging.StreamHandler(terminal)
        handler.setFormatter(logging.Formatter("%(message)s"))
        root_handler[:] = [handler]
        assert list(load_progress([1, 2, 3], "tiny")) == [1, 2, 3]
    os.close(leader)
    assert "Loading tiny" in capfd.readouterr().err  # tqdm's bar, on stderr
