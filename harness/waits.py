"""Waits on a condition with a deadline. A fixed sleep in its place is too short on a busy
machine and too long on an idle one; a wait returns as soon as the condition holds."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.1) -> bool:
    """Whether `predicate()` became true within `timeout` seconds, asked every `interval`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


async def until(
    predicate: Callable[[], object | Awaitable[object]], timeout: float, interval: float = 0.05
) -> bool:
    """`wait_for` inside an event loop: `predicate` may be a coroutine function, and the loop
    runs on between the asks."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        outcome = predicate()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(interval)
