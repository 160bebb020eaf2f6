"""The children `spate serve` runs (a worker and the API): a child that dies is started
again, and one that keeps dying, or says a restart cannot help, stops spate with a message
that says so."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("spate.serve")

# A child that dies this many times within the window is not started again.
MAX_RESTARTS = 3
RESTART_WINDOW_S = 120.0
# A child that exits with sysexits' "configuration error" failed in a way that starting it
# again with the same settings meets again (a worker whose model cannot load): spate stops
# at once, with the line the child left in its failure file.
FINAL_EXIT_CODE = os.EX_CONFIG


@dataclass
class Child:
    name: str
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)
    # Where the child writes one line saying why, when it exits with FINAL_EXIT_CODE.
    failure_file: Path | None = None

    def failure(self) -> str | None:
        if self.failure_file is None or not self.failure_file.is_file():
            return None
        return self.failure_file.read_text(errors="replace").strip() or None


class Supervisor:
    def __init__(
        self, commands: Mapping[str, list[str]], env: Mapping[str, str],
        failure_files: Mapping[str, Path] | None = None,
    ) -> None:
        files = failure_files or {}
        self.children = [Child(name, command, failure_file=files.get(name))
                         for name, command in commands.items()]
        self._env = dict(env)
        self.failed: str | None = None

    def start(self) -> None:
        for child in self.children:
            self._start(child)

    def _start(self, child: Child) -> None:
        if child.failure_file is not None:  # an earlier run's line says nothing of this one
            child.failure_file.unlink(missing_ok=True)
        child.process = subprocess.Popen(child.command, env=self._env)
        log.info("started the %s (pid %d)", child.name, child.process.pid)

    def running(self) -> list[subprocess.Popen[bytes]]:
        return [child.process for child in self.children if child.process is not None]

    def check(self) -> bool:
        """Restart every child that died; False once one died too often or said a restart
        cannot help (see `failed`), and from then on."""
        if self.failed is not None:
            return False
        for child in self.children:
            code = child.process.poll() if child.process is not None else None
            if code is None:
                continue
            if code == FINAL_EXIT_CODE:
                why = child.failure() or "its output above says why"
                self.failed = f"the {child.name} cannot start ({why}); stopping spate"
                log.error("%s", self.failed)
                return False
            now = time.monotonic()
            child.restarts = [at for at in child.restarts if now - at < RESTART_WINDOW_S]
            if len(child.restarts) >= MAX_RESTARTS:
                self.failed = (f"the {child.name} exited (code {code}) {MAX_RESTARTS + 1} times "
                               f"within {RESTART_WINDOW_S:.0f} s; stopping spate (its output "
                               "above says why)")
                log.error("%s", self.failed)
                return False
            child.restarts.append(now)
            log.warning("the %s exited (code %s); starting it again", child.name, code)
            self._start(child)
        return True

    def stop(self, timeout: float = 40.0) -> None:
        """SIGTERM every child (each drains), then SIGKILL the ones still there."""
        for process in self.running():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.running():
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
