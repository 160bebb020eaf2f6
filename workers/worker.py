"""The worker process: connect, load the model, consume requests, publish their events,
drain on SIGTERM, close. A plain asyncio program; the model runs on its own thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from events import RequestAccepted
from events.subjects import worker_client_name
from journal import CountRefused, DurableConsumer, Fenced, Journal
from workers.adoption import adopt_orphans
from workers.cache_events import CacheEvents
from workers.engine_loop import EngineLoop
from workers.job import Job
from workers.job_start import JobStart
from workers.jobs import Jobs
from workers.load_failure import ModelLoadFailed, load_failure, write_failure_file
from workers.metrics import WorkerMetrics
from workers.served_model import InvalidRequest, ServedModel, check_served_model
from workers.settings import WorkerSettings

log = logging.getLogger("spate.worker")


class Worker:
    def __init__(
        self, settings: WorkerSettings, load: Callable[[WorkerSettings], ServedModel]
    ) -> None:
        self.settings = settings
        self._load = load
        # Unreachable at start, NATS is reported once, by run()'s bounded wait.
        self._journal = Journal(settings, name=worker_client_name(settings.worker_id),
                                report_retries=False)
        self._served: ServedModel | None = None
        self._engine: EngineLoop | None = None
        self._jobs: Jobs | None = None
        self._outputs: asyncio.Queue[list[Any]] = asyncio.Queue()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.metrics = WorkerMetrics()
        self._cache_events: CacheEvents | None = None
        self._job_start: JobStart | None = None

    @property
    def served(self) -> ServedModel:
        if self._served is None:
            raise RuntimeError("the model is not loaded yet")
        return self._served

    @property
    def engine(self) -> EngineLoop:
        if self._engine is None:
            raise RuntimeError("the engine is not running yet")
        return self._engine

    @property
    def jobs(self) -> Jobs:
        if self._jobs is None:
            raise RuntimeError("the engine is not running yet")
        return self._jobs

    # -- lifecycle ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop`; JournalUnavailable when NATS does not answer within
        `nats_connect_wait_s` of the start."""
        try:
            connected = await self._journal.wait_connected(stop, self.settings.nats_connect_wait_s)
        finally:
            if not self._journal.connected:
                await self._journal.close()
        if not connected:
            return
        self._served = await self._load_model()
        loop = asyncio.get_running_loop()
        self._engine = EngineLoop(
            self._served.engine, self._outputs.put_nowait, self._on_engine_failure,
            loop.call_soon_threadsafe, on_step_time=self.metrics.observe_step,
        )
        self._jobs = Jobs(self._engine, self.settings.max_num_seqs + self.settings.max_waiting)
        self._engine.start()
        self._job_start = JobStart(
            self._journal, self.settings, self.metrics, self._served, self._engine,
            self._jobs,
        )
        self.metrics.watch(self._served.engine, self._served.card.kernels)
        if self.settings.metrics_port is not None:
            self.metrics.serve(self.settings.metrics_host, self.settings.metrics_port)
            log.info("metrics at http://%s:%d/metrics", self.settings.metrics_host,
                     self.settings.metrics_port)
        card = self._served.card
        requests = await self._journal.request_queue(
            card.name, self.settings.ack_wait_s, self.settings.max_deliver
        )
        direct = await self._journal.direct_queue(
            card.name, self.settings.worker_id, self.settings.ack_wait_s, self.settings.max_deliver
        )
        self._cache_events = CacheEvents(
            self._journal, card.name, self.settings.worker_id
        )
        cancels = await self._journal.subscribe_cancels(self.jobs.on_cancel)
        counts = await self._journal.serve_counts(card.name, self._count_input_tokens)
        background = [
            asyncio.create_task(self._publish_outputs()),
            asyncio.create_task(self._heartbeat()),
        ]
        log.info("worker %s ready: serving %s", self.settings.worker_id, self._served.card.name)
        adoption = adopt_orphans(
            self._journal, card.name, self.settings.worker_id, self.settings.ack_wait_s,
            self.settings.max_deliver, max(self.settings.heartbeat_s, 1.0), self._consume, stop,
        )
        try:
            await asyncio.gather(self._consume(direct, stop), self._consume(requests, stop),
                                 adoption)
        finally:
            await requests.close()
            await direct.close()
            await cancels.close()
            await counts.close()
            await self.jobs.drain(self.settings.drain_timeout_s)
            for task in background:
                task.cancel()
            self._engine.stop()
            self.metrics.close()
            with contextlib.suppress(Exception):
                await self._journal.registry.withdraw(card.name, self.settings.worker_id)
            await self._journal.close()

    async def _load_model(self) -> ServedModel:
        """The model, loaded; or, where it cannot be, the reason published for the API
        (clients asking for the model are told why) and ModelLoadFailed raised. A model
        that loads clears an earlier failure to load it."""
        try:
            served = await asyncio.to_thread(self._load, self.settings)
            check_served_model(served)
        except Exception as error:
            failure = load_failure(self.settings, error)
            try:
                await self._journal.registry.report_load_failure(failure)
            except Exception as publish_error:
                log.warning("could not publish the load failure: %s", publish_error)
            write_failure_file(self.settings, failure)
            await self._journal.close()
            raise ModelLoadFailed(failure) from error
        try:
            await self._journal.registry.clear_load_failure(served.card.name)
        except Exception as error:
            log.warning("could not clear an earlier load failure: %s", error)
        return served

    async def _consume(
        self, requests: DurableConsumer, stop: asyncio.Event, idle_s: float | None = None
    ) -> None:
        """Start what `requests` delivers while there is room; with `idle_s`, until it has
        delivered nothing for that long."""
        if self._job_start is None:
            raise RuntimeError("the engine is not running yet")
        start, jobs = self._job_start.run, self.jobs
        loop = asyncio.get_running_loop()
        last_delivery = loop.time()
        while not stop.is_set():
            if idle_s is not None and loop.time() - last_delivery > idle_s:
                return
            free = jobs.room()
            if free <= 0:
                await jobs.wait_for_room(0.5)
                continue
            deliveries = await requests.fetch(batch=free, timeout=0.5)
            jobs.starting(len(deliveries))
            for delivery in deliveries:
                last_delivery = loop.time()
                self._spawn(self._start_taken(start, delivery))

    async def _start_taken(self, start: Callable[[Any], Any], delivery: Any) -> None:
        try:
            await start(delivery)
        finally:
            self.jobs.started()

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- one response ------------------------------------------------------------------

    async def _publish_outputs(self) -> None:
        """One consumer of the engine's step outputs, so every response's events keep
        their order; publishes are not awaited one by one (see journal.ResponseWriter)."""
        while True:
            outputs = await self._outputs.get()
            for output in outputs:
                job = self.jobs.held(output.request_id)
                if job is None or job.finished:
                    continue
                try:
                    await self._publish_step(job, output)
                except Fenced:
                    continue  # Jobs.fenced stopped it
                except Exception as error:
                    log.exception("publishing %s failed", output.request_id)
                    self.jobs.publish_failed(job, error)

    async def _publish_step(self, job: Job, output: Any) -> None:
        publish = job.publisher.publish
        if job.events is None:
            raise RuntimeError(f"an engine output for {output.request_id} before its prompt")
        if output.error is not None:  # this response alone failed; its batch goes on
            await self.jobs.fail(job, "engine_error",
                                 f"The model failed on this response: {output.error}")
            return
        if job.output_token_ids is not None:
            job.output_token_ids.extend(output.new_token_ids)
        self._count(job, output)
        for event_type, fields in job.events.of(output):
            await publish(event_type, **fields)
        if output.finished:
            job.finished = True
            if self._cache_events is not None:
                # Before the terminal event: a client's next turn, sent as soon as this
                # one ends, must find the router already knowing where its prefix is.
                await self._cache_events.cached(job.request, self.jobs.generating())
            raw = None
            if job.output_token_ids is not None:
                raw = await asyncio.to_thread(self.served.decode, job.output_token_ids)
            await self.jobs.finish(job, output, raw)

    def _count(self, job: Job, output: Any) -> None:
        counts = self.metrics.counts
        counts.tokens_generated += len(output.new_token_ids)
        if output.reasoning_ended == "budget":
            counts.budget_cutoffs += 1
        if not job.prefill_counted and output.new_token_ids:
            job.prefill_counted = True
            counts.tokens_prefilled += output.num_prompt_tokens - output.num_cached_tokens
            counts.prompt_tokens_cached += output.num_cached_tokens

    def _on_engine_failure(self, request_ids: list[str], error: BaseException) -> None:
        self.jobs.engine_failed(request_ids, error)

    async def _count_input_tokens(self, request: RequestAccepted) -> int:
        """The prompt `request` would run with, counted: the same build as a job's start
        (`JobStart`)."""
        try:
            prompt = await asyncio.to_thread(self.served.build_prompt, request)
        except InvalidRequest as error:
            raise CountRefused(error.code, str(error), error.param) from error
        except ValueError as error:  # the chat template refused the conversation
            raise CountRefused("invalid_prompt", str(error), "input") from error
        return len(prompt.token_ids)

    # -- liveness ----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        """Advertise the model (a TTL key per worker) and keep running requests from redelivery."""
        card = self.served.card
        registry = self._journal.registry
        last_progress = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                # The card too, every time: a NATS server that restarted empty gets it back.
                await registry.advertise(card)
                await registry.heartbeat(card.name, self.settings.worker_id)
                if self._cache_events is not None:
                    await self._cache_events.load(self.jobs.generating())
                if loop.time() - last_progress > self.settings.ack_wait_s / 3:
                    last_progress = loop.time()
                    await self.jobs.in_progress()
            except Exception as error:
                log.warning("heartbeat failed: %s", error)
            await asyncio.sleep(self.settings.heartbeat_s)

