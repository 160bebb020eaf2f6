"""`spate serve` starts its worker with one core left to the API and NATS."""

from cli.main import _parser, serve_worker_command


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
