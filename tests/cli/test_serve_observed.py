"""A real `spate serve` with the default model, as a newcomer runs it: `spate events tail`
started from the same folder finds its NATS with no flags, and with
SPATE_LOG_FORMAT=json every line it writes (model loading and shutdown included) is one
JSON object."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from cli.nats_server import free_port
from cli.serve_record import SERVE_RECORD
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT
from tests.processes import ROOT, wait_for


def json_objects(output: str) -> list[dict[str, Any]]:
    """Every line of `output` as the JSON object it must be (an assertion names the
    first that is not)."""
    objects = []
    for line in output.splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        assert isinstance(parsed, dict), f"not a JSON object: {line!r}"
        objects.append(parsed)
    return objects


def ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_events_tail_finds_a_running_serve_and_every_line_is_json(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "SPATE_NATS_URL"}
    env |= {"PYTHONPATH": str(ROOT), "SPATE_LOG_FORMAT": "json",
            "SPATE_NATS_STORE_DIR": str(tmp_path / "nats")}
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    output = tmp_path / "serve.log"
    with open(output, "wb") as written:
        serve = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port)],
                                 cwd=tmp_path, env=env, stdout=written, stderr=subprocess.STDOUT)
    try:
        assert wait_for(lambda: ready(f"{base_url}/ready") or serve.poll() is not None,
                        MODEL_LOAD_TIMEOUT, interval=0.5), output.read_text()[-3000:]
        assert serve.poll() is None, output.read_text()[-3000:]
        assert (tmp_path / SERVE_RECORD).is_file()
        reply = httpx.post(f"{base_url}/v1/responses", timeout=300, json={
            "model": DEFAULT_MODEL, "input": "Say hi.", "max_output_tokens": 4})
        assert reply.status_code == 200, reply.text
        response_id = reply.json()["id"]

        tail = subprocess.run(
            [sys.executable, "-m", "cli.main", "events", "tail", "--response", response_id, "--json"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert tail.returncode == 0, tail.stderr
        events = json_objects(tail.stdout)
        assert events[0]["type"] == "request.accepted" and events[-1]["type"] == "generation.finished"
        assert [event["seq"] for event in events] == list(range(len(events)))
        (found,) = [line["message"] for line in json_objects(tail.stderr)
                    if line["message"].startswith("NATS at")]
        assert f"from spate serve (pid {serve.pid})" in found, found
    finally:
        serve.send_signal(signal.SIGINT)
        code = serve.wait(timeout=120)
    assert code == 0, output.read_text()[-3000:]
    assert not (tmp_path / SERVE_RECORD).exists()  # a stopped serve is not found
    lines = json_objects(output.read_text())
    messages = [line["message"] for line in lines]
    assert any(message.startswith(f"loaded {DEFAULT_MODEL}:") for message in messages), messages
    assert not any("nanobind" in message or "leaked" in message for message in messages)
