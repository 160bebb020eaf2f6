"""Real spate processes for tests: the API and workers as a user would start them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class SpateProcess:
    """One `python -m cli.main ...` child, its output in a log file, stopped by pid."""

    def __init__(
        self, args: list[str], env: dict[str, str], name: str, cwd: Path = ROOT
    ) -> None:
        self.name = name
        self.log_path = Path(tempfile.mkdtemp(prefix=f"spate-{name}-")) / "output.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            cwd=cwd, env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 40) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
            self.process.wait()
        self._log.close()


def wait_http(url: str, process: SpateProcess, timeout: float, status: int = 200) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"{process.name} exited:\n{process.output()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == status:
                    return
        except urllib.error.HTTPError as error:
            last = error.code
            if error.code == status:
                return
        except OSError as error:
            last = error
        time.sleep(0.2)
    raise TimeoutError(f"{url} not {status} after {timeout}s (last: {last}):\n{process.output()[-4000:]}")


def wait_for(predicate, timeout: float, interval: float = 0.1) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
