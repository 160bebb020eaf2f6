"""Codex CLI for the end-to-end tests: the pinned npm package, installed once into an
ignored cache folder, run as `codex exec` against a spate stack through a proxy that
records every request and its status."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes import ROOT

CODEX_VERSION = "0.169.0"
CACHE = ROOT / ".spate" / "npm" / f"codex-{CODEX_VERSION}"
INSTALL_TIMEOUT_S = 600


def codex_executable() -> Path:
    """The pinned `codex`, installed with npm on first use; a skip saying why where npm
    or the package cannot be had."""
    binary = CACHE / "node_modules" / ".bin" / "codex"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the Codex CLI end-to-end tests need it to fetch "
                    f"@openai/codex@{CODEX_VERSION}")
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            [npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(CACHE),
             f"@openai/codex@{CODEX_VERSION}"],
            check=True, capture_output=True, timeout=INSTALL_TIMEOUT_S,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        output = getattr(error, "stderr", b"") or b""
        pytest.skip(f"npm could not install @openai/codex@{CODEX_VERSION} (no registry "
                    f"reachable?): {output.decode(errors='replace')[-400:]}")
    return binary


@dataclass
class Exchange:
    path: str
    body: dict[str, Any]
    status: int


@dataclass
class RecordingProxy:
    """Forwards every request to spate as it is and streams the answer back, keeping each
    request body and the status spate gave it."""

    upstream: str
    exchanges: list[Exchange] = field(default_factory=list)

    def __enter__(self) -> RecordingProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {name: value for name, value in self.headers.items()
                           if name.lower() not in ("host", "content-length", "connection")}
                with httpx.stream("POST", proxy.upstream + self.path, content=body,
                                  headers=headers, timeout=900) as reply:
                    proxy.exchanges.append(Exchange(self.path, json.loads(body or b"{}"),
                                                    reply.status_code))
                    self.send_response(reply.status_code)
                    self.send_header("content-type", reply.headers.get("content-type", ""))
                    self.end_headers()
                    for chunk in reply.iter_raw():
                        self.wfile.write(chunk)
                        self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def run_codex(
    codex: Path, base_url: str, home: Path, workdir: Path, prompt: str, model: str,
    config: list[str], timeout: float,
) -> subprocess.CompletedProcess[str]:
    """`codex exec` pointed at `base_url` with `wire_api = "responses"`, as docs/guide.md
    shows, plus `config` (`key=value` overrides)."""
    overrides = [
        f'model_providers.spate={{name="spate",base_url="{base_url}/v1",wire_api="responses"}}',
        "model_provider=spate",
        *config,
    ]
    args = [str(codex), "exec", "--skip-git-repo-check", "-m", model, "-C", str(workdir)]
    for override in overrides:
        args += ["-c", override]
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [*args, prompt], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env={**os.environ, "CODEX_HOME": str(home), "NO_COLOR": "1"},
    )
