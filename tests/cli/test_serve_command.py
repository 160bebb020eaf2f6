"""`spate serve` starts its worker on every core unless told otherwise, with --store a
redis-server for the response store, and keeps a key file for sealed reasoning."""

import argparse
from pathlib import Path

import redis

from api.lowering.encrypted_content import ContentKeys, new_key
from api.settings import ApiSettings
from cli.main import _parser, serve_key_file, serve_store, serve_worker_command
from cli.settings import CliSettings
from workers.settings import WorkerSettings


def worker_command(argv: list[str]) -> list[str]:
    return serve_worker_command(_parser().parse_args(["serve", *argv]))


def threads_flag(command: list[str]) -> str | None:
    return command[command.index("--num-threads") + 1] if "--num-threads" in command else None


def test_the_worker_decodes_on_every_core_unless_told() -> None:
    assert threads_flag(worker_command([])) is None  # the worker takes every usable core
    assert threads_flag(worker_command(["--num-threads", "1"])) == "1"


def test_model_flags_reach_the_worker() -> None:
    command = worker_command(["--model", "m.gguf", "--dtype", "float32", "--kernels", "torch"])
    assert command[command.index("--model") + 1] == "m.gguf"
    assert command[command.index("--dtype") + 1] == "float32"
    assert command[command.index("--kernels") + 1] == "torch"


def test_metrics_port_reaches_the_worker() -> None:
    assert "--metrics-port" not in worker_command([])
    command = worker_command(["--metrics-port", "9464"])
    assert command[command.index("--metrics-port") + 1] == "9464"


def serve_args(argv: list[str]) -> argparse.Namespace:
    return _parser().parse_args(["serve", *argv])


def test_store_flag_starts_a_redis_keeping_its_data_in_the_store_dir(tmp_path: Path) -> None:
    data = tmp_path / "store"
    server = serve_store(serve_args(["--store"]), CliSettings(store_url=None, store_dir=str(data)))
    assert server is not None
    try:
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        assert client.config_get("dir")["dir"] == str(data.resolve())
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        client.close()
    finally:
        server.stop()
    assert data.is_dir()  # the data outlives the server


def test_no_redis_without_the_flag_or_with_a_store_url() -> None:
    assert serve_store(serve_args([]), CliSettings(store_url=None)) is None
    named = CliSettings(store_url="redis://elsewhere:6379/0")
    assert serve_store(serve_args(["--store"]), named) is None


def test_worker_settings_read_the_thread_count_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("SPATE_NUM_THREADS", "3")
    assert threads_flag(worker_command([])) is None  # the worker reads it itself
    assert WorkerSettings().num_threads == 3


def test_serve_settings_come_from_the_settings_classes(monkeypatch) -> None:
    from api.settings import ApiSettings
    from cli.settings import CliSettings

    monkeypatch.setenv("SPATE_PORT", "9123")
    monkeypatch.setenv("SPATE_NATS_STORE_DIR", "/tmp/js")
    monkeypatch.setenv("SPATE_LOG_LEVEL", "WARNING")
    args = _parser().parse_args(["serve", "--host", "0.0.0.0"])
    api = ApiSettings(host=args.host)
    assert (api.host, api.port) == ("0.0.0.0", 9123)
    cli = CliSettings()
    assert (cli.nats_store_dir, cli.log_level, cli.nats_url) == ("/tmp/js", "WARNING", None)


def test_weights_setting_reaches_the_worker() -> None:
    command = worker_command(["--weights", "quantized"])
    assert command[command.index("--weights") + 1] == "quantized"
    assert "--weights" not in worker_command([])
    parsed = _parser().parse_args(["worker", "--weights", "bf16"])
    assert parsed.weights == "bf16"


def test_serve_makes_a_key_file_once_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / ".spate" / "encryption.key"
    made = serve_key_file(ApiSettings(encryption_keys=""), str(path))
    assert made == str(path.resolve())
    assert path.stat().st_mode & 0o777 == 0o600
    key = path.read_text()
    assert ContentKeys.configured("", made).enabled
    assert serve_key_file(ApiSettings(encryption_keys=""), str(path)) == made
    assert path.read_text() == key  # a restart opens what the last run sealed


def test_configured_keys_make_no_file(tmp_path: Path) -> None:
    path = tmp_path / "encryption.key"
    assert serve_key_file(ApiSettings(encryption_keys=new_key()), str(path)) is None
    assert serve_key_file(ApiSettings(encryption_keys="", encryption_key_file="/k"), str(path)) is None
    assert not path.exists()


def running(pids: set[int]) -> list[int]:
    """Those of `pids` that still run (a zombie has ended; only its parent's wait is left)."""
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
        except FileNotFoundError:
            continue
        if "Z" not in state:
            left.append(pid)
    return left


def test_a_sigterm_while_the_model_loads_stops_every_child(tmp_path: Path) -> None:
    """`spate serve` asked to stop before it is ready stops its worker, API and NATS
    instead of waiting out the load and leaving them behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from cli.nats_server import free_port
    from harness.waits import wait_for

    env = {**os.environ, "SPATE_NATS_STORE_DIR": str(tmp_path / "nats"),
           "SPATE_ENCRYPTION_KEYS": new_key()}
    serve = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "serve", "--port", str(free_port())],
        env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(children) < 3:  # nats, worker, api
            time.sleep(0.2)
            children = set(map(int, subprocess.run(
                ["pgrep", "-P", str(serve.pid)], capture_output=True, text=True
            ).stdout.split()))
        assert len(children) >= 3, children
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=120) == 0
        assert wait_for(lambda: not running(children), timeout=30), running(children)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        for pid in children:
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
