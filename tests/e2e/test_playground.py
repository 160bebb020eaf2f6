"""The playground in a real headless browser (Debian's chromium, driven by playwright)
against real processes: nats-server, a worker with the default model and the API."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Route, async_playwright, expect

from cli.nats_server import free_port
from tests.conftest import DEFAULT_MODEL, Stack
from tests.processes import SpateProcess, wait_http

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Below the ~21 tokens after which the model ends its thinking of itself on this prompt,
# so the cutoff is what ends it and the answer pane fills.
BUDGET = 12

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="Debian's chromium is missing; `make install` installs it when run as root "
    "(apt-get install chromium)",
)

# Which pane gets text first: the reasoning must arrive before the answer.
RECORD_FIRST_PANE = """() => {
  window.firstPane = null;
  for (const id of ["reasoning", "answer"]) {
    const pane = document.getElementById(id);
    new MutationObserver(() => {
      if (window.firstPane === null && pane.textContent !== "") window.firstPane = id;
    }).observe(pane, { childList: true, characterData: true, subtree: true });
  }
}"""


async def test_playground_streams_reasoning_then_answer(stack: Stack, tmp_path: Path) -> None:
    async with async_playwright() as playwright:
        # Root (as in CI) cannot use chromium's sandbox.
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 820})
            page_errors: list[str] = []
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            await page.goto(f"{stack.base_url}/")
            await expect(page.locator("#model")).to_have_value(DEFAULT_MODEL, timeout=30_000)
            await expect(page.locator("#server-status")).to_have_text("1 model served")
            await expect(page.locator("#thinking")).to_be_enabled()

            await page.evaluate(RECORD_FIRST_PANE)
            await page.fill("#prompt", "What is 17 * 3?")
            await page.check("#thinking")
            await page.fill("#thinking-budget", str(BUDGET))
            await page.fill("#temperature", "0")
            await page.fill("#max-output-tokens", "80")
            await page.click("#send")
            await expect(page.locator("#stat-status")).to_have_text(
                re.compile(r"^(completed|incomplete)"), timeout=300_000
            )
            await expect(page.locator("#send")).to_be_enabled()

            reasoning = await page.locator("#reasoning").text_content()
            answer = await page.locator("#answer").text_content()
            assert reasoning and reasoning.strip()
            assert answer and answer.strip()
            assert await page.evaluate("window.firstPane") == "reasoning"
            assert await page.locator("#error").text_content() == ""
            assert re.fullmatch(r"\d+ ms|\d+\.\d\d s", await page.locator("#stat-ttft").inner_text())
            reasoning_tokens = int(await page.locator("#stat-reasoning-tokens").inner_text())
            output_tokens = int(await page.locator("#stat-output-tokens").inner_text())
            assert 0 < reasoning_tokens <= BUDGET < output_tokens
            assert int(await page.locator("#stat-input-tokens").inner_text()) > 0
            assert re.fullmatch(r"resp_\w+", await page.locator("#stat-response-id").inner_text())
            assert page_errors == []

            screenshot = tmp_path / "playground.png"
            await page.screenshot(path=str(screenshot), full_page=True)
            assert screenshot.read_bytes().startswith(b"\x89PNG")
            # SPATE_PLAYGROUND_SCREENSHOT=docs/playground.png refreshes the docs' picture.
            if target := os.environ.get("SPATE_PLAYGROUND_SCREENSHOT"):
                shutil.copy(screenshot, target)
        finally:
            await browser.close()

    # The same request through the API gives what the page showed (greedy, so the same
    # tokens).
    body = {
        "model": DEFAULT_MODEL, "input": "What is 17 * 3?", "reasoning": {"effort": "medium"},
        "thinking_token_budget": BUDGET, "temperature": 0, "max_output_tokens": 80,
    }
    # 429 and 503 say "try again" (a worker heartbeat late on a loaded machine, say).
    deadline = time.monotonic() + 60
    while True:
        reply = httpx.post(f"{stack.base_url}/v1/responses", json=body, timeout=300)
        if reply.status_code not in (429, 503) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert reply.status_code == 200, reply.text
    texts = {item["type"]: item["content"][0]["text"] for item in reply.json()["output"]}
    assert texts == {"reasoning": reasoning, "message": answer}


async def test_playground_at_its_defaults_shows_reasoning_and_an_answer(stack: Stack) -> None:
    """Send with every control as the page opens (thinking on, budget 64, the model's own
    temperature, 256 output tokens): both panes fill. The default model, left to itself,
    mostly ended its response inside the think block; a budgeted request may not end before
    its answer begins."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            await page.goto(f"{stack.base_url}/")
            await expect(page.locator("#model")).to_have_value(DEFAULT_MODEL, timeout=30_000)
            await expect(page.locator("#thinking")).to_be_checked()
            await expect(page.locator("#thinking-budget")).to_have_value("64")
            await page.click("#send")
            await expect(page.locator("#stat-status")).to_have_text(
                re.compile(r"^(completed|incomplete)"), timeout=300_000
            )
            assert (await page.locator("#reasoning").text_content() or "").strip()
            assert (await page.locator("#answer").text_content() or "").strip()
            assert 0 < int(await page.locator("#stat-reasoning-tokens").inner_text()) <= 64
        finally:
            await browser.close()


async def test_playground_asks_for_the_key_a_server_requires(stack: Stack) -> None:
    port = free_port()
    keyed = SpateProcess(
        ["api", "--port", str(port)],
        {"SPATE_NATS_URL": stack.nats_url, "SPATE_API_KEYS": "sk-playground"}, "keyed-api",
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/ready", keyed, timeout=60)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = await browser.new_page()
                await page.goto(f"http://127.0.0.1:{port}/")
                await expect(page.locator("#server-status")).to_have_text(
                    "this server needs an API key", timeout=30_000
                )
                await page.fill("#api-key", "sk-playground")
                await page.press("#api-key", "Tab")  # a change event: the models load again
                await expect(page.locator("#model")).to_have_value(DEFAULT_MODEL, timeout=30_000)

                await page.uncheck("#thinking")
                await expect(page.locator("#thinking-budget")).to_be_disabled()
                await page.fill("#prompt", "Say hello")
                await page.fill("#max-output-tokens", "8")
                await page.click("#send")
                await expect(page.locator("#stat-status")).to_have_text(
                    re.compile(r"^(completed|incomplete)"), timeout=300_000
                )
                assert (await page.locator("#answer").text_content() or "").strip()
                assert await page.locator("#reasoning").text_content() == ""
                assert await page.locator("#stat-reasoning-tokens").inner_text() == "0"
            finally:
                await browser.close()
    finally:
        keyed.stop()


async def test_stop_ends_the_stream(stack: Stack) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page()

            # A response that cannot end on its own before Stop is clicked.
            async def never_ending(route: Route) -> None:
                body = json.loads(route.request.post_data or "{}")
                await route.continue_(post_data=json.dumps({**body, "ignore_eos": True}))

            await page.route("**/v1/responses", never_ending)
            await page.goto(f"{stack.base_url}/")
            await expect(page.locator("#model")).to_have_value(DEFAULT_MODEL, timeout=30_000)
            await page.check("#thinking")
            await page.fill("#thinking-budget", "8")
            await page.fill("#max-output-tokens", "4000")
            await page.click("#send")
            await expect(page.locator("#answer")).not_to_have_text("", timeout=300_000)
            await page.click("#stop")
            await expect(page.locator("#stat-status")).to_have_text("stopped", timeout=30_000)
            await expect(page.locator("#send")).to_be_enabled()
            await expect(page.locator("#stop")).to_be_disabled()
        finally:
            await browser.close()
