"""The playground page at `/`: served from the package, self-contained, and asking only
for request fields the API honors (the browser test is tests/e2e/test_playground.py)."""

from __future__ import annotations

import re

import httpx

from api.routes.playground import STATIC_DIR
from api.schema.fields import FIELDS, Treatment
from events.request_settings import MAX_TEMPERATURE


async def test_root_serves_the_page_and_its_files(client: httpx.AsyncClient) -> None:
    page = await client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "<title>spate playground</title>" in page.text
    for path in re.findall(r'(?:src|href)="(/[^"]+)"', page.text):
        asset = await client.get(path)
        assert asset.status_code == 200, path
        assert asset.text == (STATIC_DIR / path.removeprefix("/static/")).read_text()
    script = await client.get("/static/playground.js")
    assert "javascript" in script.headers["content-type"]


async def test_an_unknown_static_file_is_a_404(client: httpx.AsyncClient) -> None:
    assert (await client.get("/static/nothing.js")).status_code == 404


def test_the_page_loads_nothing_from_elsewhere() -> None:
    # No CDN: every file the page needs ships in the package.
    for path in STATIC_DIR.iterdir():
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", path.read_text()), path


def test_the_page_sends_only_honored_fields() -> None:
    script = (STATIC_DIR / "playground.js").read_text()
    sent = set(re.findall(r"\bbody\.(\w+) =", script))
    literal = re.search(r"const body = \{([^}]*)\}", script)
    assert literal is not None
    sent |= set(re.findall(r"(\w+):", literal.group(1)))
    assert {"model", "input", "stream", "thinking_token_budget", "temperature",
            "max_output_tokens", "reasoning"} <= sent
    for name in sent:
        assert FIELDS[name][0] is Treatment.HONORED, name


def test_the_temperature_control_spans_the_accepted_range() -> None:
    page = (STATIC_DIR / "index.html").read_text()
    control = re.search(r'<input id="temperature"[^>]*>', page)
    assert control is not None
    assert 'min="0"' in control.group(0)
    assert f'max="{MAX_TEMPERATURE:g}"' in control.group(0)
