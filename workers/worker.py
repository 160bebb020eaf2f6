"""The worker process: connect, load the model, consume requests, publish their events,
drain on SIGTERM, close. A plain asyncio program; the model runs on its own thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig

from events import (
    GenerationFailed,
    GenerationFinished,
    GenerationStarted,
    RequestAccepted,
    Usage,
    decode,
)
from events.streams import ensure_streams
from events.subjects import (
    CANCELS_SUBJECT_PREFIX,
    MODELS_BUCKET,
    REQUESTS_STREAM,
    WORKERS_BUCKET,
    model_key,
    request_subject,
    worker_consumer,
)
from workers.engine_loop import EngineLoop
from workers.publisher import PublishFailed, ResponsePublisher
from workers.recovery import PriorProgress, cancel_requested, read_progress
from workers.served_model import InvalidRequest, ServedModel, check_served_model
from workers.settings import WorkerSettings
from workers.step_events import StepEvents, usage_of

log = logging.getLogger("spate.worker")


@dataclass(slots=True)
class Job:
    request: RequestAccepted
    msg: Any
    publisher: ResponsePublisher
    cancelled: bool = False
    finished: bool = False
    # Every output token id, kept only for enable_response_messages.
    output_token_ids: list[int] | None = None
    # Turns the engine's outputs into events; set once the prompt is built.
    events: StepEvents | None = None


class Worker:
    def __init__(
        self, settings: WorkerSettings, load: Callable[[WorkerSettings], ServedModel]
    ) -> None:
        self.settings = settings
        self._load = load
        self._nc: Any = None
        self._js: Any = None
        self._served: ServedModel | None = None
        self._engine: EngineLoop | None = None
        self._jobs: dict[str, Job] = {}
        self._outputs: asyncio.Queue[list[Any]] = asyncio.Queue()
        self._capacity = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()

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
        await self._connect(stop)
        if stop.is_set():
            return
        self._served = await asyncio.to_thread(self._load, self.settings)
        check_served_model(self._served)
        loop = asyncio.get_running_loop()
        self._engine = EngineLoop(
            self._served.engine, self._outputs.put_nowait, self._on_engine_failure,
            loop.call_soon_threadsafe,
        )
        self._engine.start()
        requests = await self._subscribe_requests()
        cancels = await self._nc.subscribe(f"{CANCELS_SUBJECT_PREFIX}.>", cb=self._on_cancel)
        background = [
            asyncio.create_task(self._publish_outputs()),
            asyncio.create_task(self._heartbeat()),
        ]
        log.info("worker %s ready: serving %s", self.settings.worker_id, self._served.card.name)
        try:
            await self._consume(requests, stop)
        finally:
            for subscription in (requests, cancels):
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()
            await self._drain()
            for task in background:
                task.cancel()
            self._engine.stop()
            with contextlib.suppress(Exception):
                kv = await self._js.key_value(WORKERS_BUCKET)
                await kv.delete(model_key(self._served.card.name))
            with contextlib.suppress(Exception):
                await self._nc.drain()

    async def _connect(self, stop: asyncio.Event) -> None:
        delay = 0.2
        while not stop.is_set():
            try:
                self._nc = await nats.connect(
                    self.settings.nats_url, name=f"spate-worker-{self.settings.worker_id}",
                    max_reconnect_attempts=-1, reconnect_time_wait=1, drain_timeout=5,
                )
                self._js = self._nc.jetstream()
                await ensure_streams(self._js, self.settings.events_max_age_s, self.settings.worker_ttl_s)
                return
            except Exception as error:
                log.warning("NATS at %s not reachable (%s); retrying", self.settings.nats_url, error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _subscribe_requests(self) -> Any:
        model = self.served.card.name
        durable = worker_consumer(model)
        config = ConsumerConfig(
            durable_name=durable,
            filter_subject=request_subject(model),
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.settings.ack_wait_s,
            max_deliver=self.settings.max_deliver,
            max_ack_pending=-1,
        )
        try:
            await self._js.add_consumer(REQUESTS_STREAM, config)
        except Exception as error:  # it exists with other settings: bring it to these
            log.info("updating consumer %s (%s)", durable, error)
            await self._js.update_consumer(REQUESTS_STREAM, config)
        return await self._js.pull_subscribe_bind(durable=durable, stream=REQUESTS_STREAM)

    async def _consume(self, requests: Any, stop: asyncio.Event) -> None:
        while not stop.is_set():
            free = self.settings.max_num_seqs - len(self._jobs)
            if free <= 0:
                self._capacity.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._capacity.wait(), 0.5)
                continue
            try:
                messages = await requests.fetch(batch=free, timeout=0.5)
            except (asyncio.TimeoutError, nats.errors.TimeoutError):
                continue
            except Exception as error:  # NATS away: the client reconnects by itself
                log.warning("fetching requests failed: %s", error)
                await asyncio.sleep(0.5)
                continue
            for msg in messages:
                self._spawn(self._start_job(msg))

    async def _drain(self) -> None:
        """Let running responses finish; hand the rest back to the queue for another worker."""
        deadline = asyncio.get_running_loop().time() + self.settings.drain_timeout_s
        while self._jobs and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        for job in list(self._jobs.values()):
            self.engine.cancel(job.request.response_id)
            with contextlib.suppress(Exception):
                await job.publisher.flush()
                await job.msg.nak()
            self._jobs.pop(job.request.response_id, None)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- one response ------------------------------------------------------------------

    async def _start_job(self, msg: Any) -> None:
        try:
            request = decode(msg.data)
        except ValueError as error:
            log.error("dropping an undecodable request: %s", error)
            await msg.term()
            return
        response_id = request.response_id
        delivered = msg.metadata.num_delivered
        progress = PriorProgress()
        if delivered > 1:
            progress = await read_progress(self._js, response_id)
            if progress.finished:
                await msg.ack()
                return
            log.info("resuming %s (delivery %d) at seq %d with %d tokens", response_id,
                     delivered, progress.next_seq, len(progress.output_token_ids))
        job = Job(request, msg, ResponsePublisher(self._js, response_id, progress.next_seq))
        self._jobs[response_id] = job  # registered first, so a cancel from now on is seen
        try:
            await self._prepare_job(job, progress, delivered)
        except Exception as error:
            # A bug must still end the response (an unanswered request hangs its client); one
            # whose failure cannot be written either goes back to the queue.
            log.exception("starting %s failed", response_id)
            try:
                if not job.finished:
                    await self._fail(job, "server_error", f"The worker could not start the response: {error}")
            except Exception as publish_error:
                await self._give_back(job, publish_error)

    async def _prepare_job(self, job: Job, progress: PriorProgress, delivered: int) -> None:
        request, response_id, served = job.request, job.request.response_id, self.served
        try:
            if delivered >= self.settings.max_deliver and delivered > 1:
                await self._fail(job, "worker_lost", f"The response failed after {delivered} delivery attempts.")
                return
            if job.cancelled or await cancel_requested(self._js, response_id):
                await self._finish_cancelled(job, 0)
                return
            prompt = await asyncio.to_thread(served.build_prompt, request)
            params = await asyncio.to_thread(served.sampling_params, request)
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
        job.events = StepEvents(request, served.token_text, prompt.opens_reasoning)
        self.engine.add(
            response_id, prompt.token_ids, params,
            output_token_ids=progress.output_token_ids,
            prompt_opens_reasoning=prompt.opens_reasoning,
        )

    async def _publish_outputs(self) -> None:
        """One consumer of the engine's step outputs, so every response's events keep
        their order; publishes are not awaited one by one (see ResponsePublisher)."""
        while True:
            outputs = await self._outputs.get()
            for output in outputs:
                job = self._jobs.get(output.request_id)
                if job is None or job.finished:
                    continue
                try:
                    await self._publish_step(job, output)
                except Exception as error:
                    log.exception("publishing %s failed", output.request_id)
                    self.engine.cancel(output.request_id)
                    self._spawn(self._give_back(job, error))

    async def _publish_step(self, job: Job, output: Any) -> None:
        publish = job.publisher.publish
        if job.events is None:
            raise RuntimeError(f"an engine output for {output.request_id} before its prompt")
        if job.output_token_ids is not None:
            job.output_token_ids.extend(output.new_token_ids)
        for event_type, fields in job.events.of(output):
            await publish(event_type, **fields)
        if output.finished:
            job.finished = True
            raw = None
            if job.output_token_ids is not None:
                raw = await asyncio.to_thread(self.served.decode, job.output_token_ids)
            await publish(GenerationFinished, finish_reason=output.finish_reason,
                          usage=usage_of(output), raw_output_text=raw)
            self._spawn(self._settle(job))

    async def _settle(self, job: Job) -> None:
        """Ack the request once its terminal event is persisted."""
        try:
            await job.publisher.flush()
            await job.msg.ack_sync()
        except (PublishFailed, Exception) as error:
            log.warning("could not settle %s: %s", job.request.response_id, error)
            with contextlib.suppress(Exception):
                await job.msg.nak()
        finally:
            self._release(job)

    async def _give_back(self, job: Job, error: BaseException) -> None:
        job.finished = True
        log.warning("handing %s back to the queue: %s", job.request.response_id, error)
        with contextlib.suppress(Exception):
            await job.msg.nak(delay=1)
        self._release(job)

    async def _fail(self, job: Job, code: str, message: str, param: str | None = None) -> None:
        job.finished = True
        await job.publisher.publish(GenerationFailed, code=code, message=message, param=param)
        await self._settle(job)

    async def _finish_cancelled(self, job: Job, input_tokens: int) -> None:
        job.finished = True
        await job.publisher.publish(
            GenerationFinished, finish_reason="cancelled",
            usage=Usage(input_tokens=input_tokens, output_tokens=0),
        )
        await self._settle(job)

    def _release(self, job: Job) -> None:
        self._jobs.pop(job.request.response_id, None)
        self._capacity.set()

    def _on_engine_failure(self, request_ids: list[str], error: BaseException) -> None:
        for request_id in request_ids:
            job = self._jobs.get(request_id)
            if job is not None and not job.finished:
                self._spawn(self._fail(job, "engine_error", f"The model failed: {error}"))

    async def _on_cancel(self, msg: Any) -> None:
        response_id = msg.subject.rsplit(".", 1)[-1]
        job = self._jobs.get(response_id)
        if job is not None and not job.cancelled:
            job.cancelled = True
            self.engine.cancel(response_id)

    # -- liveness ----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        """Advertise the model (TTL'd key) and keep running requests from redelivery."""
        card = self.served.card
        models = await self._js.key_value(MODELS_BUCKET)
        workers = await self._js.key_value(WORKERS_BUCKET)
        await models.put(model_key(card.name), card.model_dump_json().encode())
        last_progress = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                await workers.put(model_key(card.name), self.settings.worker_id.encode())
                if loop.time() - last_progress > self.settings.ack_wait_s / 3:
                    last_progress = loop.time()
                    for job in list(self._jobs.values()):
                        await job.msg.in_progress()
            except Exception as error:
                log.warning("heartbeat failed: %s", error)
            await asyncio.sleep(self.settings.heartbeat_s)



