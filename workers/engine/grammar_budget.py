"""Grammar compilation with a time and memory budget, in a child process of its own.

A client's schema, regex or grammar can take xgrammar seconds and gigabytes to compile
(20,000 choices took 31 s). A thread cannot be stopped, so the worker compiles in a
child process it can kill: past `timeout_s`, or once the child's resident memory passes
`memory_bytes`, the child is killed (a new one starts for the next compile) and the
request fails with GrammarBudgetExceeded. The compiled grammar comes back serialized and
is kept in a small cache, so a grammar seen before costs no trip at all.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Any

import xgrammar as xgr

from workers.engine.grammar import GrammarError

# How often the parent looks at the child's memory while it compiles.
WATCH_EVERY_S = 0.02
# A child is given this long to import xgrammar and load the vocabulary (not the budget).
START_TIMEOUT_S = 300.0
CACHED_GRAMMARS = 64


class GrammarBudgetExceeded(GrammarError):
    """Compiling a grammar passed its time or memory budget."""


class BudgetedGrammarCompiler:
    """GrammarCompiler's interface (`compile`, `vocab_size`, `tokenizer_info`), compiling
    in a killable child process. Thread-safe: compiles take turns on the one child."""

    def __init__(self, tokenizer_info: xgr.TokenizerInfo, vocab_size: int,
                 timeout_s: float, memory_bytes: int) -> None:
        self.tokenizer_info = tokenizer_info
        self.vocab_size = vocab_size
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self._info_json = tokenizer_info.serialize_json()
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._cache: OrderedDict[str, xgr.CompiledGrammar] = OrderedDict()

    def start(self) -> None:
        """Start the child now rather than at the first compile."""
        with self._lock:
            self._running()

    def compile(self, structural_tag: dict[str, Any]) -> xgr.CompiledGrammar:
        source = json.dumps({"type": "structural_tag", "format": structural_tag})
        with self._lock:
            cached = self._cache.get(source)
            if cached is not None:
                self._cache.move_to_end(source)
                return cached
            status, payload = self._compile(source)
            if status == "error":
                raise GrammarError(payload)
            compiled = xgr.CompiledGrammar.deserialize_json(payload, self.tokenizer_info)
            self._cache[source] = compiled
            if len(self._cache) > CACHED_GRAMMARS:
                self._cache.popitem(last=False)
            return compiled

    def close(self) -> None:
        with self._lock:
            self._stop_child()

    def _compile(self, source: str) -> tuple[str, str]:
        child = self._running()
        child.conn.send(source)
        deadline = time.monotonic() + self.timeout_s
        while True:
            if _resident_bytes(child.process.pid) > self.memory_bytes:
                self._stop_child()
                raise GrammarBudgetExceeded(
                    f"needed more than {self.memory_bytes / 2**20:g} MiB to compile (the budget)")
            if child.conn.poll(WATCH_EVERY_S):
                break
            if time.monotonic() > deadline:
                self._stop_child()
                raise GrammarBudgetExceeded(
                    f"took longer than {self.timeout_s:g} s to compile (the budget)")
        try:
            reply: tuple[str, str] = child.conn.recv()
        except EOFError:  # the child died compiling it (out of memory, say)
            self._stop_child()
            raise GrammarBudgetExceeded("stopped its compiler (out of memory?)") from None
        return reply

    def _running(self) -> _Child:
        if self._child is None or not self._child.process.is_alive():
            self._stop_child()
            self._child = _Child.start(self._info_json, self.vocab_size)
        return self._child

    def _stop_child(self) -> None:
        if self._child is not None:
            self._child.stop()
            self._child = None


class _Child:
    def __init__(self, process: Any, conn: Connection) -> None:
        self.process = process
        self.conn = conn

    @classmethod
    def start(cls, info_json: str, vocab_size: int) -> _Child:
        # spawn, not fork: the worker has threads (and maybe CUDA) a fork would copy.
        context = multiprocessing.get_context("spawn")
        parent_end, child_end = context.Pipe()
        process = context.Process(target=_serve, args=(child_end, info_json),
                                  name="spate-grammar-compiler", daemon=True)
        process.start()
        child_end.close()
        if not parent_end.poll(START_TIMEOUT_S) or parent_end.recv() != "ready":
            process.kill()
            raise GrammarError("the grammar compiler did not start")
        return cls(process, parent_end)

    def stop(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


def _serve(conn: Connection, info_json: str) -> None:
    """The child: compile each source sent, answer ("ok", serialized) or ("error", why)."""
    info = xgr.TokenizerInfo.deserialize_json(info_json)
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    conn.send("ready")
    while True:
        try:
            source = conn.recv()
        except EOFError:
            return
        try:
            compiled = compiler.compile_structural_tag(source)
            conn.send(("ok", compiled.serialize_json()))
        except (RuntimeError, ValueError, MemoryError) as error:
            conn.send(("error", str(error)))


def _resident_bytes(pid: int | None) -> int:
    """The process's resident memory (Linux /proc); 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
