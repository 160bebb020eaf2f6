"""The default model's checkpoint, read once (tokenizer and chat template; no weights)."""

from __future__ import annotations

import pytest

from workers.model import DEFAULT_MODEL
from workers.model.loader import read_checkpoint


@pytest.fixture(scope="session")
def checkpoint():
    return read_checkpoint(DEFAULT_MODEL)[0]
