"""Reasoning that round-trips without a store: `encrypted_content` on reasoning items.

A client that keeps no server state (`store: false`, as Codex runs) asks for
`include: ["reasoning.encrypted_content"]` and sends the reasoning items back on its next
turn. The text is sealed with AES-GCM under the server's key, bound to the owner and the
model (associated data), so an item opens only for the key holder that made it and for the
model that thought it; a tampered, foreign or misdirected item is a 400 naming it.

Keys come from SPATE_ENCRYPTION_KEYS (comma-separated) and SPATE_ENCRYPTION_KEY_FILE (one
a line): the first key seals, every key opens, so a new key is rolled in first and an old
one dropped once the items sealed under it have aged out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from api.errors import APIError
from api.schema.input_items import ReasoningItem, ReasoningText
from api.schema.request import ResponsesRequest

ENCRYPTED_REASONING = "reasoning.encrypted_content"
KEYS_ENV = "SPATE_ENCRYPTION_KEYS"
KEY_FILE_ENV = "SPATE_ENCRYPTION_KEY_FILE"
KEY_BYTES = 32
# Versioned, so a later format can be told apart from this one.
_PREFIX = "spate1."
_KEY_ID_BYTES = 8
_NONCE_BYTES = 12

log = logging.getLogger("spate.api")


class InvalidKey(ValueError):
    """A configured key that is not 32 bytes of url-safe base64."""


def new_key() -> str:
    """A fresh key in the form the settings take."""
    return base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def _decode_key(text: str) -> bytes:
    try:
        key = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as error:
        raise InvalidKey(f"an encryption key is not base64: {error}") from None
    if len(key) != KEY_BYTES:
        raise InvalidKey(f"an encryption key must be {KEY_BYTES} bytes, not {len(key)}")
    return key


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()[:_KEY_ID_BYTES]


def _bound_to(owner: str | None, model: str, purpose: str) -> bytes:
    return json.dumps([f"spate.{purpose}", owner or "", model]).encode()


class ContentKeys:
    """The server's sealing keys; with none, nothing is sealed and nothing opens."""

    def __init__(self, keys: list[str]) -> None:
        self._keys = {_key_id(key): key for key in map(_decode_key, keys)}
        self._sealing = _decode_key(keys[0]) if keys else None
        self._warned = False

    @classmethod
    def configured(cls, keys: str, key_file: str | None) -> ContentKeys:
        """The keys named by the settings: the variable's first, then the file's."""
        listed = [key.strip() for key in keys.split(",") if key.strip()]
        if key_file:
            listed += [line.strip() for line in Path(key_file).read_text().splitlines()
                       if line.strip() and not line.startswith("#")]
        return cls(listed)

    @property
    def enabled(self) -> bool:
        return self._sealing is not None

    def warn_once(self) -> None:
        """Say once a process that a client asked for sealed reasoning and got none."""
        if not self._warned:
            self._warned = True
            log.warning("a request asked for %s, but no key is configured (%s or %s): "
                        "reasoning items go out without it", ENCRYPTED_REASONING,
                        KEYS_ENV, KEY_FILE_ENV)

    def seal(self, text: str, owner: str | None, model: str, purpose: str = "reasoning") -> str:
        """The sealed form of `text` (call only with a key: see `enabled`)."""
        if self._sealing is None:
            raise ValueError("no sealing key is configured")
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(self._sealing).encrypt(nonce, text.encode(), _bound_to(owner, model, purpose))
        token = base64.urlsafe_b64encode(_key_id(self._sealing) + nonce + sealed).decode()
        return _PREFIX + token

    def open(self, token: str, owner: str | None, model: str, purpose: str = "reasoning") -> str:
        """The text `token` sealed; ValueError, saying why, when it cannot be opened here."""
        if not self._keys:
            raise ValueError(f"this server has no encryption key ({KEYS_ENV}), so it cannot "
                             "open encrypted reasoning")
        if not token.startswith(_PREFIX):
            raise ValueError("it was not sealed by spate")
        try:
            raw = base64.urlsafe_b64decode(token[len(_PREFIX):])
        except (binascii.Error, ValueError):
            raise ValueError("it is not valid base64") from None
        key = self._keys.get(raw[:_KEY_ID_BYTES])
        if key is None:
            raise ValueError("it was sealed under a key this server does not hold")
        nonce, sealed = raw[_KEY_ID_BYTES:_KEY_ID_BYTES + _NONCE_BYTES], raw[_KEY_ID_BYTES + _NONCE_BYTES:]
        try:
            return AESGCM(key).decrypt(nonce, sealed, _bound_to(owner, model, purpose)).decode()
        except (InvalidTag, ValueError):
            raise ValueError("it was altered, or sealed for another API key or model") from None


def opened_reasoning(
    request: ResponsesRequest, keys: ContentKeys, owner: str | None
) -> ResponsesRequest:
    """The request with each reasoning item's `encrypted_content` opened into its text, as
    the model first wrote it; a 400 naming the item for one that does not open."""
    if isinstance(request.input, str) or not any(
        isinstance(item, ReasoningItem) and item.encrypted_content is not None
        for item in request.input
    ):
        return request
    items: list[Any] = []
    for index, item in enumerate(request.input):
        if isinstance(item, ReasoningItem) and item.encrypted_content is not None:
            try:
                text = keys.open(item.encrypted_content, owner, request.model)
            except ValueError as error:
                raise APIError(
                    400, f"The encrypted_content of input[{index}] cannot be opened: {error}.",
                    param=f"input[{index}].encrypted_content", code="invalid_encrypted_content",
                ) from None
            item = item.model_copy(update={
                "content": [ReasoningText(type="reasoning_text", text=text)],
                "encrypted_content": None,
            })
        items.append(item)
    return request.model_copy(update={"input": items})


class ReasoningSealer:
    """Adds `encrypted_content` to the reasoning items of what a reply sends: SSE events
    (an item's events and the Responses they carry) and the Response itself."""

    def __init__(self, keys: ContentKeys, owner: str | None, model: str) -> None:
        self._keys = keys
        self._owner = owner
        self._model = model

    def __call__(self, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("type") == "reasoning" and payload.get("status") != "in_progress":
            text = "".join(part.get("text", "") for part in payload.get("content") or [])
            return {**payload, "encrypted_content": self._keys.seal(text, self._owner, self._model)}
        if isinstance(payload.get("item"), dict):
            return {**payload, "item": self(payload["item"])}
        if isinstance(payload.get("response"), dict):
            return {**payload, "response": self(payload["response"])}
        if isinstance(payload.get("output"), list):
            return {**payload, "output": [self(item) for item in payload["output"]]}
        return payload


def sealer_for(
    request: ResponsesRequest, keys: ContentKeys, owner: str | None
) -> ReasoningSealer | None:
    """The sealer a reply needs, or None when the request did not ask for it or there is
    no key: Codex asks at its defaults, so asking without a key is not an error."""
    if ENCRYPTED_REASONING not in (request.include or []):
        return None
    if not keys.enabled:
        keys.warn_once()
        return None
    return ReasoningSealer(keys, owner, request.model)
