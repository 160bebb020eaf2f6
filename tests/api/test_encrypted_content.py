"""Sealed reasoning: what opens, what does not, and the 400s a client gets for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from api.app import create_app
from api.lowering.encrypted_content import ContentKeys, InvalidKey, new_key
from api.settings import ApiSettings
from cli.nats_server import free_port

OWNER, MODEL = "owner-a", "SmolLM2-135M-Instruct"


def test_sealed_text_opens_for_the_same_owner_and_model() -> None:
    keys = ContentKeys([new_key()])
    token = keys.seal("first, think", OWNER, MODEL)
    assert "first, think" not in token
    assert keys.open(token, OWNER, MODEL) == "first, think"
    assert keys.seal("first, think", OWNER, MODEL) != token  # a fresh nonce each time


@pytest.mark.parametrize(("owner", "model"), [("owner-b", MODEL), (None, MODEL), (OWNER, "other")])
def test_another_owner_or_model_cannot_open_it(owner: str | None, model: str) -> None:
    keys = ContentKeys([new_key()])
    token = keys.seal("secret", OWNER, MODEL)
    with pytest.raises(ValueError, match="another API key or model"):
        keys.open(token, owner, model)


def test_a_tampered_token_does_not_open() -> None:
    keys = ContentKeys([new_key()])
    token = keys.seal("secret thoughts", OWNER, MODEL)
    flipped = token[:-6] + ("A" if token[-6] != "A" else "B") + token[-5:]
    with pytest.raises(ValueError, match="altered"):
        keys.open(flipped, OWNER, MODEL)


def test_rotation_the_first_key_seals_every_key_opens() -> None:
    old, new = new_key(), new_key()
    sealed_before = ContentKeys([old]).seal("before", OWNER, MODEL)
    rotated = ContentKeys([new, old])
    sealed_after = rotated.seal("after", OWNER, MODEL)
    assert rotated.open(sealed_before, OWNER, MODEL) == "before"
    assert ContentKeys([new]).open(sealed_after, OWNER, MODEL) == "after"
    with pytest.raises(ValueError, match="does not hold"):
        ContentKeys([new]).open(sealed_before, OWNER, MODEL)


def test_foreign_content_and_no_key() -> None:
    keys = ContentKeys([new_key()])
    with pytest.raises(ValueError, match="not sealed by spate"):
        keys.open("gAAAAABm-foreign-provider-token", OWNER, MODEL)
    assert not ContentKeys([]).enabled
    with pytest.raises(ValueError, match="no encryption key"):
        ContentKeys([]).open(keys.seal("x", OWNER, MODEL), OWNER, MODEL)


def test_keys_from_the_settings_and_a_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    first, second = new_key(), new_key()
    key_file = tmp_path / "keys"
    key_file.write_text(f"# rotated in on Monday\n{second}\n")
    keys = ContentKeys.configured(f" {first} ,", str(key_file))
    token = ContentKeys([second]).seal("from the file's key", OWNER, MODEL)
    assert keys.open(token, OWNER, MODEL) == "from the file's key"
    assert ContentKeys([first]).open(keys.seal("sealed by the first", OWNER, MODEL), OWNER, MODEL)
    with pytest.raises(InvalidKey):
        ContentKeys(["c2hvcnQ"])


@pytest.fixture
async def keyed_client() -> AsyncIterator[httpx.AsyncClient]:
    settings = ApiSettings(nats_url=f"nats://127.0.0.1:{free_port()}", encryption_keys=new_key())
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=transport, base_url="http://spate"
    ) as connected:
        yield connected


def reasoning_input(encrypted: str) -> list[object]:
    return [{"role": "user", "content": "Hi"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": encrypted},
            {"role": "user", "content": "Go on"}]


async def test_content_that_does_not_open_is_a_400_naming_the_item(
    keyed_client: httpx.AsyncClient,
) -> None:
    foreign = ContentKeys([new_key()]).seal("not ours", None, MODEL)
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        reply = await keyed_client.post(path, json={"model": MODEL, "input": reasoning_input(foreign)})
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["param"] == "input[1].encrypted_content"
        assert "does not hold" in error["message"]


async def test_opening_without_a_key_is_a_400(client: httpx.AsyncClient) -> None:
    sealed = ContentKeys([new_key()]).seal("thought", None, MODEL)
    reply = await client.post("/v1/responses", json={"model": MODEL, "input": reasoning_input(sealed)})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "input[1].encrypted_content"
    assert "no encryption key" in reply.json()["error"]["message"]
