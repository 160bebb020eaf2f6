"""`spate serve` starts a child that died again, and stops with a clear message when one
keeps dying (real child processes)."""

from __future__ import annotations

import logging
import os
import signal
import sys

import pytest

from cli.supervisor import FINAL_EXIT_CODE, MAX_RESTARTS, Supervisor
from tests.processes import wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
CRASHER = [sys.executable, "-c", "import sys; sys.exit(3)"]


def test_a_child_that_dies_is_started_again(caplog: pytest.LogCaptureFixture) -> None:
    children = Supervisor({"worker": SLEEPER, "api": SLEEPER}, os.environ)
    children.start()
    try:
        worker = children.children[0]
        assert worker.process is not None
        first_pid = worker.process.pid
        os.kill(first_pid, signal.SIGKILL)
        worker.process.wait()
        with caplog.at_level(logging.WARNING, logger="spate.serve"):
            assert children.check()
        assert worker.process.pid != first_pid and worker.process.poll() is None
        assert "the worker exited (code -9); starting it again" in caplog.text
        assert children.failed is None
    finally:
        children.stop(timeout=5)
    assert all(process.poll() is not None for process in children.running())


def test_a_child_that_keeps_dying_stops_spate_with_a_message() -> None:
    children = Supervisor({"worker": CRASHER, "api": SLEEPER}, os.environ)
    children.start()
    try:
        assert wait_for(lambda: not children.check(), 30, 0.1)
        assert children.failed is not None
        assert f"the worker exited (code 3) {MAX_RESTARTS + 1} times" in children.failed
        assert len(children.children[0].restarts) == MAX_RESTARTS
    finally:
        children.stop(timeout=5)


def test_a_child_that_says_a_restart_cannot_help_stops_spate_at_once(tmp_path) -> None:
    failure_file = tmp_path / "failure.txt"
    refuser = [sys.executable, "-c",
               f"import pathlib, sys; pathlib.Path({str(failure_file)!r}).write_text("
               f"'cannot load model m.gguf: unsupported GGUF architecture mamba\\n'); "
               f"sys.exit({FINAL_EXIT_CODE})"]
    children = Supervisor({"worker": refuser, "api": SLEEPER}, os.environ,
                          failure_files={"worker": failure_file})
    children.start()
    try:
        assert wait_for(lambda: not children.check(), 30, 0.1)
        assert children.children[0].restarts == []  # not started again
        assert children.failed == ("the worker cannot start (cannot load model m.gguf: "
                                   "unsupported GGUF architecture mamba); stopping spate")
        assert not children.check()  # and stays failed
    finally:
        children.stop(timeout=5)


def test_a_failure_line_from_an_earlier_run_is_not_taken_for_this_one(tmp_path) -> None:
    failure_file = tmp_path / "failure.txt"
    failure_file.write_text("a line from an earlier run\n")
    silent = [sys.executable, "-c", f"import sys; sys.exit({FINAL_EXIT_CODE})"]
    children = Supervisor({"worker": silent}, os.environ, failure_files={"worker": failure_file})
    children.start()
    try:
        assert wait_for(lambda: not children.check(), 30, 0.1)
        assert children.failed == "the worker cannot start (its output above says why); stopping spate"
    finally:
        children.stop(timeout=5)
