"""`spate serve` starts its worker with one core left to the API and NATS, and with
--store a redis-server for the response store."""

import argparse
from pathlib import Path

import redis

from cli.main import _parser, serve_store, serve_worker_command


def worker_command(argv: list[str], cpus: int, environ: dict[str, str] | None = None) -> list[str]:
    return serve_worker_command(_parser().parse_args(["serve", *argv]), cpus, environ or {})


def threads_flag(command: list[str]) -> str | None:
    return command[command.index("--num-threads") + 1] if "--num-threads" in command else None


def test_worker_leaves_one_core_to_the_api_and_nats() -> None:
    assert threads_flag(worker_command([], cpus=2)) == "1"
    assert threads_flag(worker_command([], cpus=16)) == "15"
    assert threads_flag(worker_command([], cpus=1)) == "1"


def test_an_explicit_thread_count_wins() -> None:
    assert threads_flag(worker_command(["--num-threads", "2"], cpus=2)) == "2"
    # Set in the environment, the worker reads it itself.
    assert threads_flag(worker_command([], cpus=2, environ={"SPATE_NUM_THREADS": "2"})) is None


def test_model_flags_reach_the_worker() -> None:
    command = worker_command(["--model", "m.gguf", "--dtype", "float32", "--kernels", "torch"], 4)
    assert command[command.index("--model") + 1] == "m.gguf"
    assert command[command.index("--dtype") + 1] == "float32"
    assert command[command.index("--kernels") + 1] == "torch"


def serve_args(argv: list[str]) -> argparse.Namespace:
    return _parser().parse_args(["serve", *argv])


def test_store_flag_starts_a_redis_keeping_its_data_in_the_store_dir(tmp_path: Path) -> None:
    data = tmp_path / "store"
    server = serve_store(serve_args(["--store", "--store-dir", str(data)]), environ={})
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
    assert serve_store(serve_args([]), environ={}) is None
    named = {"SPATE_STORE_URL": "redis://elsewhere:6379/0"}
    assert serve_store(serve_args(["--store"]), environ=named) is None
