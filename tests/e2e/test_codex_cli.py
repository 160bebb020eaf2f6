"""Codex CLI end to end: the pinned `@openai/codex` run as `codex exec` against a real
stack (NATS, API, worker with the default model), through a proxy that records each
request and its status. Skipped, saying why, only where npm cannot fetch the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DEFAULT_MODEL, Stack
from tests.e2e.codex_cli import RecordingProxy, codex_executable, run_codex

# What Codex prints when a stream fails with the typed context_length_exceeded error.
CONTEXT_WINDOW_MESSAGE = "ran out of room in the model's context window"
# Codex's settings that fit the default model's 8k context: short instructions and no
# tools but the one Codex always keeps (docs/guide.md's Codex section shows the same).
SMALL_CONFIG = [
    "features.multi_agent=false", "features.goals=false", "features.view_image=false",
    "features.unified_exec=false", "features.shell_tool=false", "features.apps=false",
    "features.plugins=false", 'web_search="disabled"',
]
TIMEOUT_S = 900


@pytest.fixture(scope="module")
def codex() -> Path:
    return codex_executable()


def test_codex_at_its_defaults_is_accepted_and_told_the_context_is_too_small(
    stack: Stack, codex: Path, tmp_path: Path
) -> None:
    with RecordingProxy(stack.base_url) as proxy:
        done = run_codex(codex, proxy.base_url, tmp_path / "home", tmp_path, "Say hi.",
                         DEFAULT_MODEL, [], TIMEOUT_S)
    assert proxy.exchanges, done.stderr
    assert all(exchange.status == 200 for exchange in proxy.exchanges), [
        (exchange.path, exchange.status) for exchange in proxy.exchanges]
    # What Codex sends at its defaults, each accepted above.
    body = proxy.exchanges[0].body
    assert body["store"] is False and "client_metadata" in body and "prompt_cache_key" in body
    assert body["include"] == ["reasoning.encrypted_content"]
    assert {tool["type"] for tool in body["tools"]} >= {"function", "namespace", "web_search"}
    assert any(item.get("role") == "developer" for item in body["input"])
    # Its instructions and tools do not fit 8k tokens: the typed error Codex understands.
    assert done.returncode != 0
    assert CONTEXT_WINDOW_MESSAGE in done.stderr, done.stderr[-3000:]


def test_codex_exec_completes_a_turn_in_a_configuration_that_fits(
    stack: Stack, codex: Path, tmp_path: Path
) -> None:
    instructions = tmp_path / "instructions.md"
    instructions.write_text("You are a helpful assistant. Answer briefly.\n")
    config = [f'model_instructions_file="{instructions}"', *SMALL_CONFIG]
    with RecordingProxy(stack.base_url) as proxy:
        done = run_codex(codex, proxy.base_url, tmp_path / "home", tmp_path, "Say hi.",
                         DEFAULT_MODEL, config, TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), done.stderr[-3000:]
    assert proxy.exchanges and all(exchange.status == 200 for exchange in proxy.exchanges)
