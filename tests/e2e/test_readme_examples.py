"""Every example in README.md and the pages it sends a reader on to (docs/guide.md,
docs/deployment.md, docs/development.md: readme_blocks.EXAMPLE_PAGES), run as a reader
would against real processes: the session's nats-server, worker (the default model) and
API, and an API with the store on a real redis-server where an example needs the store.
Python blocks of one section run in one namespace, in order, as pasted into one session;
shell lines run in bash; `localhost:8000` becomes the fixture's address. A block neither
run here nor listed in NOT_RUN fails `test_every_example_is_run_or_listed`."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from cli.nats_server import free_port
from cli.redis_server import EmbeddedRedis
from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.readme_blocks import (
    ROOT,
    bash,
    block_with,
    example_blocks,
    finish,
    reader_env,
    run_python,
    start_script,
)
from tests.processes import SpateProcess, wait_for, wait_http

# Blocks that cannot run here, each found by a snippet of its text, and why.
NOT_RUN = {
    "make serve   #": "starts the whole stack itself, and `make test` runs every test: "
                     "this test's fixtures are that stack",
    "make test                   #": "the test suite and the benchmarks themselves",
    'model_provider = "spate"': "Codex CLI's configuration (TOML); tests/e2e/test_codex_cli.py "
                                "runs Codex with it",
    "model_instructions_file": "Codex CLI's configuration (TOML); tests/e2e/test_codex_cli.py "
                               "runs Codex with it",
    "docker compose up --build": "needs a docker daemon and builds images for minutes; "
                                 "tests/compose/test_compose.py validates compose.yaml",
    "scripts/compose_check.sh": "needs a docker daemon and root, and builds images for minutes",
}
# Blocks run here, each found by a snippet of its text, and the test that runs it.
RUN = {
    "curl -N localhost:8000/v1/responses": "test_try_it_with_curl",
    'client = OpenAI(base_url="http://localhost:8000/v1"': "test_try_it_with_the_sdk",
    '"thinking_token_budget": 64': "test_try_it_with_the_sdk",
    'weather = {"type": "function"': "test_try_it_with_the_sdk",
    "responses_websocket_session(": "test_the_websocket_program",
    "previous_response_id=first.id": "test_stored_responses",
    "curl -s localhost:8000/metrics": "test_observe_it",
}
BUDGET_BLOCK = '"thinking_token_budget": 64'
# The thinking-budget example's question, and others it runs with besides.
QUESTION = "What is 17 * 3?"
OTHER_QUESTIONS = ("What is 12 + 30?", "Name three colors.")


def test_every_example_is_run_or_listed() -> None:
    blocks = example_blocks()
    assert {block.page for block in blocks} == {
        "README.md", "docs/guide.md", "docs/deployment.md", "docs/development.md"}
    for block in blocks:
        claims = [snippet for snippet in (*NOT_RUN, *RUN) if snippet in block.text]
        assert len(claims) == 1, (
            f"{block.page} line {block.line} ({block.section}): claimed by {claims}; run it "
            "in a test here, or list it in NOT_RUN with the reason it cannot run")
    for snippet in (*NOT_RUN, *RUN):
        block_with(snippet, blocks)  # no entry outlives its block
    assert set(RUN.values()) <= set(globals()), "RUN names a test that does not exist"


def test_try_it_with_curl(stack: Stack) -> None:
    printed = bash(block_with("curl -N localhost:8000/v1/responses").at(stack.base_url))
    data = [line[len("data: "):] for line in printed.splitlines() if line.startswith("data: ")]
    # The stream closes with vLLM's `[DONE]` sentinel after the terminal event.
    assert data[-1] == "[DONE]"
    events = [json.loads(line) for line in data[:-1]]
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def answer_apart(printed: str) -> tuple[str, str]:
    """The thinking-budget example's reasoning and answer, each under its heading."""
    parts = re.split(r"^--- (Reasoning|Answer) ---$", printed, flags=re.MULTILINE)
    headings = parts[1::2]
    assert headings == ["Reasoning", "Answer"], printed
    return parts[2].strip(), parts[4].strip()


def test_try_it_with_the_sdk(stack: Stack) -> None:
    session: dict[str, object] = {}
    sdk_block = block_with('client = OpenAI(base_url="http://localhost:8000/v1"')
    assert sdk_block.section == block_with(BUDGET_BLOCK).section == "Try it"
    assert "Paris" in run_python(sdk_block, stack.base_url, session)

    # The budget example with two other questions at once, each as a program of its own.
    budget = block_with(BUDGET_BLOCK)
    assert QUESTION in budget.text
    others = [start_script(sdk_block.at(stack.base_url) + budget.at(stack.base_url).replace(
        QUESTION, question)) for question in OTHER_QUESTIONS]
    runs = [run_python(budget, stack.base_url, session)]
    runs += [finish(process, timeout=300) for process in others]
    for printed in runs:
        reasoning, answer = answer_apart(printed)
        assert reasoning and answer, printed

    printed = run_python(block_with('weather = {"type": "function"'), stack.base_url, session)
    assert printed == ""
    call = session["call"]
    assert call.type == "function_call" and call.name == "get_weather"  # type: ignore[attr-defined]
    assert json.loads(call.arguments)["city"]  # type: ignore[attr-defined]
    assert session["answer"].output_text.strip()  # type: ignore[attr-defined]
    person = session["person"]
    assert isinstance(person, session["Person"])  # type: ignore[arg-type]
    assert person.name and isinstance(person.age, int)  # type: ignore[attr-defined]


def test_the_websocket_program(stack: Stack) -> None:
    """The block is a whole program: it runs as one, and prints the agent's answer."""
    program = block_with("responses_websocket_session(")
    printed = finish(start_script(program.at(stack.base_url)), timeout=300)
    assert printed.strip()


@pytest.fixture(scope="module")
def store_address(stack: Stack) -> Iterator[str]:
    """An API with the store on (`make serve STORE=1`), beside the session's worker."""
    with EmbeddedRedis() as redis:
        port = free_port()
        api = SpateProcess(["api", "--port", str(port)],
                           {"SPATE_NATS_URL": stack.nats_url, "SPATE_STORE_URL": redis.url},
                           "readme-store-api")
        try:
            wait_http(f"http://127.0.0.1:{port}/ready", api, timeout=60)
            yield f"http://127.0.0.1:{port}"
        finally:
            api.stop()


def test_stored_responses(stack: Stack, store_address: str) -> None:
    block = block_with("previous_response_id=first.id")
    # The reader's `client` from "Try it", pointed at a server with the store on.
    session: dict[str, object] = {"client": OpenAI(base_url=f"{store_address}/v1", api_key="unused")}
    printed = run_python(block, store_address, session)
    assert session["second"].previous_response_id == session["first"].id  # type: ignore[attr-defined]
    lines = printed.splitlines()
    assert lines[0] in ("queued", "in_progress", "completed")
    assert lines[-1] == "cancelled"
    poem = "\n".join(lines[1:-1]).strip()
    assert poem
    job = session["client"].responses.retrieve(session["job"].id)  # type: ignore[attr-defined]
    assert job.status in ("completed", "incomplete") and job.output_text.strip() == poem


def commands_of(text: str) -> list[str]:
    """A shell block's commands, one a line, without their trailing comments."""
    commands = [re.sub(r"\s+#.*$", "", line).strip() for line in text.splitlines()]
    return [command for command in commands if command and not command.startswith("#")]


def follow(command: str, until: str, make_traffic: bool, base_url: str, nats_url: str) -> str:
    """Runs a command that follows the event log until its output holds `until` (making a
    short response now and then, for the followers that read only new events)."""
    output = Path(tempfile.mkdtemp(prefix="readme-follow-")) / "output"
    with output.open("w") as sink:
        process = subprocess.Popen(["bash", "-c", command], cwd=ROOT, stdout=sink,
                                   stderr=subprocess.STDOUT,
                                   env=reader_env(SPATE_NATS_URL=nats_url))
    try:
        def seen() -> bool:
            if make_traffic:
                httpx.post(f"{base_url}/v1/responses", timeout=120, json={
                    "model": DEFAULT_MODEL, "input": "Say hi", "max_output_tokens": 2})
            return until in output.read_text()

        assert wait_for(seen, timeout=120, interval=0.5), output.read_text()
        return output.read_text()
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


def test_observe_it(stack: Stack) -> None:
    assert stack.worker_metrics_url is not None
    metrics_port = stack.worker_metrics_url.split(":")[-1].split("/")[0]
    response = httpx.post(f"{stack.base_url}/v1/responses", timeout=120, json={
        "model": DEFAULT_MODEL, "input": "Say hi", "max_output_tokens": 4}).json()
    commands = commands_of(block_with("curl -s localhost:8000/metrics").at(stack.base_url))
    ran = []
    for command in commands:
        if command == "spate worker --metrics-port 9101 &":
            # The session's worker, which the fixture starts with --metrics-port.
            ran.append(command)
            continue
        command = command.replace("localhost:9101", f"127.0.0.1:{metrics_port}")
        if command.startswith(("curl ", "until curl ")):
            lines = bash(command).splitlines()
            assert lines and all(line.startswith("spate_") for line in lines)
        elif command.startswith("spate events tail --response"):
            command = command.replace("resp_...", response["id"])
            printed = bash(command, timeout=120, SPATE_NATS_URL=stack.nats_url)
            types = [json.loads(line)["type"] for line in printed.splitlines()]
            assert types[0] == "request.accepted" and types[-1] == "generation.finished"
        elif command.startswith("spate events tail"):
            until = "request.accepted" if "--model" in command else "generation.finished"
            follow(command, until, True, stack.base_url, stack.nats_url)
        elif command.startswith("python -m examples.usage_meter"):
            follow(command, f"{DEFAULT_MODEL} ", False, stack.base_url, stack.nats_url)
        else:
            raise AssertionError(f"no way to run {command!r} here: add one")
        ran.append(command)
    assert len(ran) == len(commands) == 7
