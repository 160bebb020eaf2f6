"""The fixtures every backend's contract test class provides, and the ones built on them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Literal

import pytest

from store.base import Store

StoreFactory = Callable[..., Store]
Owner = Literal["response", "conversation"]


class ContractBase:
    """A backend's test class overrides `make_store`, `unavailable_store`,
    `remaining_ttls` and `followed`; the contract's tests use nothing else of the backend."""

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        """A factory: `make_store(ttl_s=...)` returns a new, connected store."""
        raise NotImplementedError

    @pytest.fixture
    async def unavailable_store(self) -> AsyncIterator[Store]:
        """A store whose backend has been stopped."""
        raise NotImplementedError
        yield  # pragma: no cover

    async def remaining_ttls(self, kind: Owner, owner_id: str) -> list[float]:
        """Seconds left to live of every stored key of a response or conversation."""
        raise NotImplementedError

    def followed(self, store: Store) -> int:
        """Responses that `store`'s followers follow now (a follower counts from when it
        has started following)."""
        raise NotImplementedError

    @pytest.fixture
    async def store(self, make_store: StoreFactory) -> AsyncIterator[Store]:
        store = make_store()
        try:
            yield store
        finally:
            await store.close()

    @pytest.fixture
    async def other_store(self, make_store: StoreFactory) -> AsyncIterator[Store]:
        """A second store on the same backend: another projector, another replica."""
        store = make_store()
        try:
            yield store
        finally:
            await store.close()
