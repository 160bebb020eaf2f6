"""The worker process: connect, load the model, consume requests, publish their events,
drain on SIGTERM, close. A plain asyncio program; the model runs on its own thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from events import (
    GenerationFailed,
    GenerationFinished,
    GenerationStarted,
    RequestAccepted,
    Usage,
    decode,
)
from events.subjects import worker_client_name
from journal import CountRefused, Delivery, DurableConsumer, Fenced, Journal, ResponseWriter
from journal.trace_context import trace_id_of
from workers.adoption import adopt_orphans
from workers.cache_events import CacheEvents
from workers.engine_loop import AddRequest, EngineLoop
from workers.metrics import WorkerMetrics
from workers.output.step_events import StepEvents, usage_of
from workers.recovery import PriorProgress, progress_of
from workers.served_model import InvalidRequest, Prompt, ServedModel, check_served_model
from workers.settings import WorkerSettings

log = logging.getLogger("spate.worker")

# Cancels of responses with no job here that are remembered: a start reads the stored
# cancels and registers its job within milliseconds, so only the latest matter.
EARLY_CANCELS_KEPT = 1024


@dataclass(slots=True)
class Job:
    request: RequestAccepted
    delivery: Delivery
    publisher: ResponseWriter
    # The worker's log with this response's id and trace id on every line.
    log: logging.LoggerAdapter[logging.Logger]
    cancelled: bool = False
    finished: bool = False
    # Every output token id, kept only for enable_response_messages.
    output_token_ids: list[int] | None = None
    # Turns the engine's outputs into events; set once the prompt is built.
    events: StepEvents | None = None
    # Its prompt's prefill has been counted (on its first engine output).
    prefill_counted: bool = False


def response_log(response_id: str, traceparent: str | None) -> logging.LoggerAdapter[logging.Logger]:
    return logging.LoggerAdapter(
        log, {"response_id": response_id, "trace_id": trace_id_of(traceparent)}
    )


class Worker:
    def __init__(
        self, settings: WorkerSettings, load: Callable[[WorkerSettings], ServedModel]
    ) -> None:
        self.settings = settings
        self._load = load
        self._journal = Journal(settings, name=worker_client_name(settings.worker_id))
        self._served: ServedModel | None = None
        self._engine: EngineLoop | None = None
        self._jobs: dict[str, Job] = {}
        self._outputs: asyncio.Queue[list[Any]] = asyncio.Queue()
        self._capacity = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        # Cancels seen for responses with no job here, newest last (see _on_cancel).
        self._early_cancels: OrderedDict[str, bool] = OrderedDict()
        self.metrics = WorkerMetrics()
        self._cache_events: CacheEvents | None = None

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

    # -- lifecycle ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        if not await self._journal.wait_connected(stop):
            await self._journal.close()
            return
        self._served = await asyncio.to_thread(self._load, self.settings)
        check_served_model(self._served)
        loop = asyncio.get_running_loop()
        self._engine = EngineLoop(
            self._served.engine, self._outputs.put_nowait, self._on_engine_failure,
            loop.call_soon_threadsafe, on_step_time=self.metrics.observe_step,
        )
        self._engine.start()
        self.metrics.watch(self._served.engine)
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
            self._journal.connection.nc, card.name, self.settings.worker_id
        )
        cancels = await self._journal.subscribe_cancels(self._on_cancel)
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
            await self._drain()
            for task in background:
                task.cancel()
            self._engine.stop()
            self.metrics.close()
            with contextlib.suppress(Exception):
                await self._journal.registry.withdraw(card.name, self.settings.worker_id)
            await self._journal.close()

    async def _consume(
        self, requests: DurableConsumer, stop: asyncio.Event, idle_s: float | None = None
    ) -> None:
        """Start what `requests` delivers while there is room; with `idle_s`, until it has
        delivered nothing for that long."""
        loop = asyncio.get_running_loop()
        last_delivery = loop.time()
        while not stop.is_set():
            if idle_s is not None and loop.time() - last_delivery > idle_s:
                return
            free = self.settings.max_num_seqs + self.settings.max_waiting - len(self._jobs)
            if free <= 0:
                self._capacity.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._capacity.wait(), 0.5)
                continue
            for delivery in await requests.fetch(batch=free, timeout=0.5):
                last_delivery = loop.time()
                self._spawn(self._start_job(delivery))

    async def _drain(self) -> None:
        """Let running responses finish; hand the rest back to the queue for another worker."""
        deadline = asyncio.get_running_loop().time() + self.settings.drain_timeout_s
        while self._jobs and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        for job in list(self._jobs.values()):
            self.engine.cancel(job.request.response_id)
            with contextlib.suppress(Exception):
                await job.publisher.flush()
                await job.delivery.nak()
            self._jobs.pop(job.request.response_id, None)

    def _generating(self) -> int:
        """Responses still generating here (not those only settling their ack): the load
        the routers weigh."""
        return sum(not job.finished for job in self._jobs.values())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- one response ------------------------------------------------------------------

    async def _start_job(self, delivery: Delivery) -> None:
        try:
            request = decode(delivery.data)
        except ValueError as error:
            log.error("dropping an undecodable request: %s", error)
            await delivery.term()
            return
        response_id = request.response_id
        job_log = response_log(response_id, delivery.traceparent)
        delivered = delivery.num_delivered
        running = self._jobs.get(response_id)
        if running is not None and not running.finished:
            # Redelivered to the worker that is running it (its heartbeat came too late, or
            # NATS lost the consumer's state): it goes on here, settled with this delivery.
            log.info("%s was redelivered to its own worker; it goes on", response_id)
            running.delivery = delivery
            with contextlib.suppress(Exception):
                await delivery.in_progress()
            return
        progress = PriorProgress()
        # The prompt is built while the lease is taken and the cancels are read: it has no
        # effect, and on one core's worth of CPU it is the start's longest part. Not for a
        # redelivery: its log says first whether building it is what stopped the last worker.
        prepared = self._prepare_soon(request) if delivered == 1 else None
        # The cancel check shares the lease's round trip; a cancel written after the check
        # and before the job is registered is remembered by _on_cancel.
        cancel_read = asyncio.ensure_future(self._journal.cancel_requested(response_id))
        cancel_read.add_done_callback(_retrieve_error)
        try:
            # Taken before the log is read: a worker that held it before (frozen past the
            # ack wait) can write nothing after the read.
            lease_seq = await self._journal.take_delivery_lease(
                response_id, delivery.subject
            )
        except Exception as error:
            log.warning("could not take the lease of %s: %s", response_id, error)
            await delivery.nak(delay=1)
            return
        if lease_seq is None:  # routed here, but not taken in time: the shared queue has it
            job_log.info("%s was handed to the shared queue before this worker took it",
                         response_id)
            await delivery.ack()
            return
        if delivered > 1:
            self.metrics.counts.redeliveries += 1
            progress = progress_of(await self._journal.read_log(response_id))
            if progress.finished:
                await delivery.ack()
                return
            if progress.output_token_ids:
                self.metrics.counts.resumes += 1
            job_log.info("resuming %s (delivery %d) at seq %d with %d tokens", response_id,
                         delivered, progress.next_seq, len(progress.output_token_ids))
        else:
            job_log.info("took %s (%s)", response_id, request.model)
        job = Job(request, delivery, self._journal.writer(
            response_id, progress.next_seq, lease_seq,
            on_fenced=lambda: self._on_fenced(response_id, job),
        ), job_log)
        self._jobs[response_id] = job  # registered first, so a cancel from now on is seen
        try:
            await self._prepare_job(job, progress, delivered, prepared, cancel_read)
        except Exception as error:
            # A bug must still end the response (an unanswered request hangs its client); one
            # whose end cannot be written either goes back to the queue, never left here
            # heartbeated. Finished already: writing its end is what failed.
            job_log.exception("starting %s failed", response_id)
            if job.finished:
                await self._give_back(job, error)
            else:
                await self._end_failed(job, "server_error",
                                       f"The worker could not start the response: {error}")

    def _prepare_soon(self, request: RequestAccepted) -> asyncio.Future[tuple[Prompt, Any]]:
        """The prompt and sampling parameters, built on a thread."""
        prepared = asyncio.ensure_future(asyncio.to_thread(self._prompt_and_params, request))
        prepared.add_done_callback(_retrieve_error)  # a start that ends early never reads it
        return prepared

    def _prompt_and_params(self, request: RequestAccepted) -> tuple[Prompt, Any]:
        return self.served.build_prompt(request), self.served.sampling_params(request)

    async def _prepare_job(
        self, job: Job, progress: PriorProgress, delivered: int,
        prepared: asyncio.Future[tuple[Prompt, Any]] | None, cancel_read: asyncio.Future[bool],
    ) -> None:
        request, response_id = job.request, job.request.response_id
        try:
            if delivered >= self.settings.max_deliver and delivered > 1:
                await self._fail(job, "worker_lost", f"The response failed after {delivered} delivery attempts.")
                return
            tries = self.settings.max_prepare_tries
            if delivered > tries and not progress.prepared:
                await self._fail(job, "server_error", (
                    f"No worker could prepare this request in {tries} tries (each stopped "
                    "while building its prompt or grammar), so it is not tried again."))
                return
            if job.cancelled or self._early_cancels.pop(response_id, False) or await cancel_read:
                await self._finish_cancelled(job, 0)
                return
            prompt, params = await (prepared or self._prepare_soon(request))
        except InvalidRequest as error:
            await self._fail(job, error.code, str(error), param=error.param)
            return
        except ValueError as error:  # the chat template refused the conversation
            await self._fail(job, "invalid_prompt", str(error), param="input")
            return
        messages = request.enable_response_messages
        if messages:
            job.output_token_ids = list(progress.output_token_ids)
        await job.publisher.publish(
            GenerationStarted, worker_id=self.settings.worker_id,
            input_tokens=len(prompt.token_ids),
            resumed_output_tokens=len(progress.output_token_ids),
            prompt_text=prompt.text if messages else None,
            prompt_token_ids=tuple(prompt.token_ids) if messages else None,
        )
        job.events = StepEvents(request, self.served.token_text, prompt.opens_reasoning)
        if job.finished:  # fenced out while it was being prepared
            return
        self.engine.add(AddRequest(
            response_id, prompt.token_ids, params,
            output_token_ids=progress.output_token_ids,
            prompt_opens_reasoning=prompt.opens_reasoning,
        ))

    async def _publish_outputs(self) -> None:
        """One consumer of the engine's step outputs, so every response's events keep
        their order; publishes are not awaited one by one (see journal.ResponseWriter)."""
        while True:
            outputs = await self._outputs.get()
            for output in outputs:
                job = self._jobs.get(output.request_id)
                if job is None or job.finished:
                    continue
                try:
                    await self._publish_step(job, output)
                except Fenced:
                    continue  # _on_fenced stopped it
                except Exception as error:
                    log.exception("publishing %s failed", output.request_id)
                    self.engine.cancel(output.request_id)
                    self._spawn(self._give_back(job, error))

    async def _publish_step(self, job: Job, output: Any) -> None:
        publish = job.publisher.publish
        if job.events is None:
            raise RuntimeError(f"an engine output for {output.request_id} before its prompt")
        if output.error is not None:  # this response alone failed; its batch goes on
            await self._fail(job, "engine_error", f"The model failed on this response: {output.error}")
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
                await self._cache_events.cached(job.request, self._generating())
            raw = None
            if job.output_token_ids is not None:
                raw = await asyncio.to_thread(self.served.decode, job.output_token_ids)
            await publish(GenerationFinished, finish_reason=output.finish_reason,
                          usage=usage_of(output), raw_output_text=raw)
            job.log.info("finished %s: %s, %d output tokens", output.request_id,
                         output.finish_reason, output.num_output_tokens)
            self._spawn(self._settle(job))

    def _count(self, job: Job, output: Any) -> None:
        counts = self.metrics.counts
        counts.tokens_generated += len(output.new_token_ids)
        if output.reasoning_ended == "budget":
            counts.budget_cutoffs += 1
        if not job.prefill_counted and output.new_token_ids:
            job.prefill_counted = True
            counts.tokens_prefilled += output.num_prompt_tokens - output.num_cached_tokens
            counts.prompt_tokens_cached += output.num_cached_tokens

    async def _settle(self, job: Job) -> None:
        """Ack the request once its terminal event is persisted."""
        try:
            await job.publisher.flush()
            await job.delivery.ack()
        except Exception as error:  # PublishFailed, Fenced, or NATS away
            job.log.warning("could not settle %s: %s", job.request.response_id, error)
            if not job.publisher.fenced:
                with contextlib.suppress(Exception):
                    await job.delivery.nak()
        finally:
            self._release(job)

    async def _give_back(self, job: Job, error: BaseException) -> None:
        job.finished = True
        if job.publisher.fenced:  # another worker holds it now: neither ack nor hand back
            self._release(job)
            return
        job.log.warning("handing %s back to the queue: %s", job.request.response_id, error)
        with contextlib.suppress(Exception):
            await job.delivery.nak(delay=1)
        self._release(job)

    async def _fail(self, job: Job, code: str, message: str, param: str | None = None) -> None:
        job.finished = True
        await job.publisher.publish(GenerationFailed, code=code, message=message, param=param)
        await self._settle(job)

    async def _end_failed(self, job: Job, code: str, message: str) -> None:
        """`_fail`, or hand the request back when even its failure cannot be written."""
        try:
            await self._fail(job, code, message)
        except Exception as error:
            await self._give_back(job, error)

    async def _finish_cancelled(self, job: Job, input_tokens: int) -> None:
        job.finished = True
        await job.publisher.publish(
            GenerationFinished, finish_reason="cancelled",
            usage=Usage(input_tokens=input_tokens, output_tokens=0),
        )
        await self._settle(job)

    def _release(self, job: Job) -> None:
        if self._jobs.get(job.request.response_id) is job:
            del self._jobs[job.request.response_id]
        self._capacity.set()

    def _on_fenced(self, response_id: str, job: Job) -> None:
        """Another worker took the response over while this one was stalled (frozen past
        the ack wait): stop its sequence and free its resources. The delivery is neither
        acked nor handed back: it belongs to the new holder."""
        job.finished = True
        self.engine.cancel(response_id)
        self._release(job)

    def _on_engine_failure(self, request_ids: list[str], error: BaseException) -> None:
        for request_id in request_ids:
            job = self._jobs.get(request_id)
            if job is not None and not job.finished:
                self._spawn(self._end_failed(job, "engine_error", f"The model failed: {error}"))

    def _on_cancel(self, response_id: str) -> None:
        job = self._jobs.get(response_id)
        if job is None:
            # Perhaps one this worker is starting, its cancel check already sent: kept
            # for the start to see (the latest few only; any other worker's response is
            # just as likely).
            self._early_cancels[response_id] = True
            while len(self._early_cancels) > EARLY_CANCELS_KEPT:
                self._early_cancels.popitem(last=False)
        elif not job.cancelled:
            job.cancelled = True
            self.engine.cancel(response_id)

    async def _count_input_tokens(self, request: RequestAccepted) -> int:
        """The prompt `request` would run with, counted: the same build as `_start_job`."""
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
                    await self._cache_events.load(self._generating())
                if loop.time() - last_progress > self.settings.ack_wait_s / 3:
                    last_progress = loop.time()
                    for job in list(self._jobs.values()):
                        await job.delivery.in_progress()
            except Exception as error:
                log.warning("heartbeat failed: %s", error)
            await asyncio.sleep(self.settings.heartbeat_s)


def _retrieve_error(future: asyncio.Future[Any]) -> None:
    """Marks a background future's error as seen, for a start that returned before it."""
    if not future.cancelled():
        future.exception()
