"""`x-codex-turn-state`: the token that keeps one turn of a client on one worker.

Codex takes the header from the first reply of a turn (an HTTP response, or a WebSocket
handshake) and sends it back on every later request of that turn; whichever API replica
gets such a request sends it to the same worker, where the turn's prefix is cached. The
token says which turn it is (a random key) and, when the API knew it, the worker that
turn runs on; it is sealed like reasoning (api/lowering/encrypted_content.py, bound to
the owner), so every replica holding the same keys can open it and no client can make
one for another owner. Without a key it travels unsealed, marked as such, and names its
owner in the clear: any replica can read it, and a forged one can only steer the
forger's own requests.

A token that does not open, names another owner or is too long is ignored, never an
error: routing is a hint, and the request is served all the same.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from dataclasses import dataclass

from api.lowering.encrypted_content import ContentKeys

HEADER = "x-codex-turn-state"
# Codex replays the token verbatim; one longer than this was not made here.
MAX_TOKEN_CHARS = 512
# A worker id too long to carry is left out: the turn key alone routes the turn.
MAX_WORKER_CHARS = 128
_PURPOSE = "turn_state"
_UNSEALED = "spate0."


@dataclass(frozen=True, slots=True)
class TurnState:
    """One turn's routing: its key, and the worker it runs on where known."""

    turn: str
    worker: str | None = None

    @classmethod
    def new(cls, worker: str | None = None) -> TurnState:
        return cls(secrets.token_hex(8), worker)


def issue(keys: ContentKeys, owner: str, state: TurnState) -> str:
    """The header value for `state`, bound to `owner`."""
    worker = state.worker if state.worker and len(state.worker) <= MAX_WORKER_CHARS else None
    text = json.dumps({"t": state.turn, "w": worker})
    if keys.enabled:
        return keys.seal(text, owner, "", purpose=_PURPOSE)
    clear = json.dumps({"t": state.turn, "w": worker, "o": owner})
    return _UNSEALED + base64.urlsafe_b64encode(clear.encode()).decode()


def read(keys: ContentKeys, owner: str, token: str | None) -> TurnState | None:
    """The turn a request's header names, or None when it names none this owner may use."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        return None
    try:
        if token.startswith(_UNSEALED):
            if keys.enabled:
                return None  # with a key every token is sealed: this one was made elsewhere
            fields = json.loads(base64.urlsafe_b64decode(token[len(_UNSEALED):]).decode())
            if fields.get("o") != owner:
                return None
        elif keys.enabled:
            fields = json.loads(keys.open(token, owner, "", purpose=_PURPOSE))
        else:
            return None  # sealed by a replica with keys this one lacks
        turn, worker = fields["t"], fields.get("w")
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error,
            UnicodeDecodeError):
        return None
    if not isinstance(turn, str) or not turn or not (worker is None or isinstance(worker, str)):
        return None
    return TurnState(turn, worker or None)
