"""Runs the engine on a thread of its own, so a model step never blocks the event loop.

The seam between the worker process and the engine is typed: the process drives any
`Engine` (the continuous-batching one in workers/engine/, or a benchmark's), and its
commands (`AddRequest`, `CancelRequest`) reach the thread through a queue; each step's
outputs come back to the asyncio loop with call_soon_threadsafe.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from collections.abc import Sequence as TokenIds
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # torch-heavy: the process imports the engine only to load a model
    from workers.engine.llm_engine import RequestOutput
    from workers.engine.sampling_params import SamplingParams

log = logging.getLogger("spate.worker.engine")


class Engine(Protocol):
    """What the worker process needs of an engine."""

    def add_request(
        self, request_id: str, prompt_token_ids: TokenIds[int], params: SamplingParams,
        output_token_ids: TokenIds[int] = (), prompt_opens_reasoning: bool = False,
    ) -> None:
        """Queue a request; raise ValueError for one the engine refuses."""

    def cancel(self, request_id: str) -> bool:
        """Stop a request; the next step reports it finished. False if unknown or done."""

    def has_unfinished_requests(self) -> bool: ...

    def step(self) -> list[RequestOutput]: ...


@dataclass(frozen=True, slots=True)
class AddRequest:
    """Start a request: its prompt and, when resumed, the output another engine made."""

    request_id: str
    prompt_token_ids: TokenIds[int]
    params: SamplingParams
    output_token_ids: TokenIds[int] = ()
    prompt_opens_reasoning: bool = False


@dataclass(frozen=True, slots=True)
class CancelRequest:
    request_id: str


EngineCommand = AddRequest | CancelRequest


class EngineLoop:
    def __init__(
        self,
        engine: Engine,
        on_outputs: Callable[[list[RequestOutput]], None],
        on_failure: Callable[[list[str], BaseException], None],
        call_soon: Callable[..., Any],
        on_step_time: Callable[[float], None] | None = None,
    ) -> None:
        self._engine = engine
        self._on_outputs = on_outputs
        self._on_failure = on_failure
        self._call_soon = call_soon
        self._on_step_time = on_step_time
        self._commands: queue.SimpleQueue[EngineCommand] = queue.SimpleQueue()
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

    def add(self, command: AddRequest) -> None:
        self._commands.put(command)
        self._wake.set()

    def cancel(self, request_id: str) -> None:
        self._commands.put(CancelRequest(request_id))
        self._wake.set()

    def _apply_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, AddRequest):
                try:
                    self._engine.add_request(
                        command.request_id, command.prompt_token_ids, command.params,
                        output_token_ids=command.output_token_ids,
                        prompt_opens_reasoning=command.prompt_opens_reasoning,
                    )
                    self._active.add(command.request_id)
                except Exception as error:  # a request the engine refuses fails alone
                    self._call_soon(self._on_failure, [command.request_id], error)
            elif command.request_id in self._active:
                self._engine.cancel(command.request_id)

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
