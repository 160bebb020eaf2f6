"""A worker's Prometheus metrics, served on its own port (`--metrics-port`).

The engine's state (sequences, KV blocks, preemptions) is read when scraped, so a decode
step pays nothing for it; counts the worker keeps are plain integers bumped once per
engine output batch on the event loop; the step time is one histogram sample per step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from events import KernelBackend

# Seconds a decode or prefill step takes: a few ms on a GPU, up to seconds on a CPU.
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass(slots=True)
class WorkerCounts:
    """What the worker counts itself; read by the collector at scrape time."""

    tokens_generated: int = 0
    # Prompt tokens the model computed, and prompt tokens the prefix cache already held.
    tokens_prefilled: int = 0
    prompt_tokens_cached: int = 0
    budget_cutoffs: int = 0
    # Requests delivered again (a worker before this one did not finish them), and those
    # of them this worker continued from a log that already had output.
    redeliveries: int = 0
    resumes: int = 0


class WorkerCollector(Collector):
    def __init__(self, counts: WorkerCounts, engine: Any, kernels: KernelBackend | None) -> None:
        self._counts = counts
        self._engine = engine
        self._kernels = kernels

    def collect(self) -> Iterator[Metric]:
        counts = self._counts
        if self._kernels is not None:
            # A fallback to slower ops shows as backend="torch" with its reason.
            yield InfoMetricFamily(
                "spate_worker_kernel_backend",
                "The kernel backend the model runs on, and why it fell back where it did.",
                value={"backend": self._kernels.name, "ops": self._kernels.ops,
                       "fallback": self._kernels.fallback or ""},
            )
        for name, help_text, value in (
            ("spate_worker_generated_tokens", "Tokens generated (reasoning, text and tool calls).", counts.tokens_generated),
            ("spate_worker_prefilled_tokens", "Prompt tokens computed by prefill (prefix-cache hits excluded).", counts.tokens_prefilled),
            ("spate_worker_prefix_cache_hit_tokens", "Prompt tokens served from the prefix cache.", counts.prompt_tokens_cached),
            ("spate_worker_reasoning_budget_cutoffs", "Think blocks closed by thinking_token_budget.", counts.budget_cutoffs),
            ("spate_worker_redeliveries", "Requests delivered to this worker after an earlier delivery.", counts.redeliveries),
            ("spate_worker_resumes", "Redelivered responses continued from output already in the log.", counts.resumes),
        ):
            yield CounterMetricFamily(name, help_text, value=value)
        prompt_tokens = counts.tokens_prefilled + counts.prompt_tokens_cached
        yield GaugeMetricFamily(
            "spate_worker_prefix_cache_hit_ratio",
            "Share of prompt tokens served from the prefix cache since the worker started.",
            value=counts.prompt_tokens_cached / prompt_tokens if prompt_tokens else 0.0,
        )
        scheduler = getattr(self._engine, "scheduler", None)
        if scheduler is not None:
            # len() of a list another thread appends to is atomic: no lock is needed.
            yield GaugeMetricFamily("spate_worker_running_sequences", "Sequences in the running batch.",
                                    value=len(scheduler.running))
            yield GaugeMetricFamily("spate_worker_waiting_sequences", "Sequences waiting to be scheduled.",
                                    value=len(scheduler.waiting))
            yield CounterMetricFamily("spate_worker_preemptions", "Sequences preempted (to be recomputed).",
                                      value=scheduler.num_preemptions)
        blocks = getattr(self._engine, "block_manager", None)
        if blocks is not None:
            free = blocks.num_free_blocks
            yield GaugeMetricFamily("spate_worker_kv_blocks_free", "Paged KV cache blocks free.", value=free)
            yield GaugeMetricFamily("spate_worker_kv_blocks_used", "Paged KV cache blocks in use.",
                                    value=blocks.num_blocks - free)


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.counts = WorkerCounts()
        self.step_time = Histogram(
            "spate_worker_step_seconds", "Time of one engine step (prefill or decode).",
            buckets=STEP_BUCKETS, registry=self.registry,
        )
        self._server: Any = None

    def watch(self, engine: Any, kernels: KernelBackend | None = None) -> None:
        """Read `engine`'s state from now on (and report the kernel backend it runs on)."""
        self.registry.register(WorkerCollector(self.counts, engine, kernels))

    def observe_step(self, seconds: float) -> None:
        self.step_time.observe(seconds)

    def serve(self, host: str, port: int) -> None:
        self._server, _ = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
