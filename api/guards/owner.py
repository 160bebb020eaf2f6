"""The owner an API key stands for: a digest of the key, which scopes everything the key
can name or reach and every bound it is held to (docs/api.md, "Tenancy"); the key itself
is never stored or published."""

from __future__ import annotations

import hashlib


def key_owner(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]
