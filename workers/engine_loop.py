"""Runs the engine on a thread of its own, so a model step never blocks the event loop.

Commands (add, cancel) reach the thread through a queue; each step's outputs come back
to the asyncio loop with call_soon_threadsafe.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("spate.worker.engine")


class EngineLoop:
    def __init__(
        self,
        engine: Any,
        on_outputs: Callable[[list[Any]], None],
        on_failure: Callable[[list[str], BaseException], None],
        call_soon: Callable[..., Any],
        on_step_time: Callable[[float], None] | None = None,
    ) -> None:
        self._engine = engine
        self._on_outputs = on_outputs
        self._on_failure = on_failure
        self._call_soon = call_soon
        self._on_step_time = on_step_time
        self._commands: queue.SimpleQueue[tuple[str, tuple[Any, ...]]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stopping = False
        self._active: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="spate-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=30)

    def add(self, request_id: str, *args: Any, **kwargs: Any) -> None:
        self._commands.put(("add", (request_id, args, kwargs)))
        self._wake.set()

    def cancel(self, request_id: str) -> None:
        self._commands.put(("cancel", (request_id,)))
        self._wake.set()

    def _apply_commands(self) -> None:
        while True:
            try:
                kind, payload = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                request_id, args, kwargs = payload
                try:
                    self._engine.add_request(request_id, *args, **kwargs)
                    self._active.add(request_id)
                except Exception as error:  # a request the engine refuses fails alone
                    self._call_soon(self._on_failure, [request_id], error)
            elif payload[0] in self._active:
                self._engine.cancel(payload[0])

    def _run(self) -> None:
        while not self._stopping:
            self._apply_commands()
            if not self._engine.has_unfinished_requests():
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                started = time.perf_counter()
                outputs = self._engine.step()
                if self._on_step_time is not None:
                    self._on_step_time(time.perf_counter() - started)
            except Exception as error:
                # A step that raises leaves every running sequence in doubt: fail them
                # all (their requests go back to the queue) rather than serve garbage.
                log.exception("engine step failed")
                failed, self._active = sorted(self._active), set()
                for request_id in failed:
                    self._engine.cancel(request_id)
                self._call_soon(self._on_failure, failed, error)
                continue
            for output in outputs:
                if output.finished:
                    self._active.discard(output.request_id)
            if outputs:
                self._call_soon(self._on_outputs, outputs)
