"""Stopping a child process the way every spate launcher does: SIGTERM, then SIGKILL."""

from __future__ import annotations

import subprocess


def terminate(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """End `process` (one this program started) if it still runs: politely, then for good."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
