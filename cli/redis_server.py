"""An embedded redis-server: the response store for `spate serve --store` and the tests.

Bound to 127.0.0.1 only, its data (an append-only file) in `store_dir`. The binary is
the system's `redis-server` (on Debian, the redis-server package; `make install` adds it).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from cli.child_process import terminate
from cli.nats_server import free_port


def find_redis_server() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise FileNotFoundError(
            "redis-server not found: install it (Debian: apt-get install redis-server; "
            "make install does it when run as root)"
        )
    return found


class EmbeddedRedis:
    def __init__(
        self, port: int | None = None, store_dir: str | None = None, *, cluster: bool = False
    ) -> None:
        self.port = port or free_port()
        # A Redis Cluster node (its slots given by whoever forms the cluster).
        self.cluster = cluster
        self._own_dir = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="spate-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return Path(self.store_dir) / "redis-server.log"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        Path(self.store_dir).mkdir(parents=True, exist_ok=True)
        # The append-only file keeps every write across a restart; the store is a
        # projection, but the log it is rebuilt from only lasts the stream's max age.
        # No RDB snapshots: they would only duplicate the append-only file.
        command = [
            find_redis_server(), "--bind", "127.0.0.1", "--port", str(self.port),
            "--dir", str(Path(self.store_dir).resolve()), "--appendonly", "yes",
            "--save", "", "--daemonize", "no", "--logfile", str(self.log_path.resolve()),
        ]
        if self.cluster:
            # The cluster bus on a free port of its own, not the port + 10000 default.
            command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                        "--cluster-port", str(free_port())]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                error = self.log_path.read_text(errors="replace").strip() if self.log_path.exists() else ""
                raise RuntimeError(f"redis-server exited at start: {error}")
            if self._answers_ping():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def _answers_ping(self) -> bool:
        # A raw PING: while Redis loads its data it accepts connections but answers
        # -LOADING, which is not ready yet.
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        terminate(self.process)
        self.process = None
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
