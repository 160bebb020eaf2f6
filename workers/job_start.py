"""The start of a response on a worker: take its lease, read what an earlier delivery left
in its log, build its prompt and hand it to the engine, or end it at once when it cannot run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from events import EventDecodeError, GenerationStarted, RequestAccepted, decode
from journal import Delivery, Journal
from workers.engine_loop import AddRequest, EngineLoop
from workers.job import Job, response_log
from workers.jobs import Jobs
from workers.metrics import WorkerMetrics
from workers.output.step_events import StepEvents
from workers.recovery import PriorProgress, progress_of
from workers.served_model import InvalidRequest, Prompt, ServedModel
from workers.settings import WorkerSettings

# The worker's own logger: a start's lines read as the worker's.
log = logging.getLogger("spate.worker")


class JobStart:
    """Starts what the worker's queues deliver, holding each in the worker's `jobs` once
    its lease is taken, and ending there any it cannot run."""

    def __init__(
        self, journal: Journal, settings: WorkerSettings, metrics: WorkerMetrics,
        served: ServedModel, engine: EngineLoop, jobs: Jobs,
    ) -> None:
        self._journal = journal
        self._settings = settings
        self._metrics = metrics
        self._served = served
        self._engine = engine
        self._jobs = jobs

    async def run(self, delivery: Delivery) -> None:
        try:
            request = decode(delivery.data)
            if not isinstance(request, RequestAccepted):
                raise EventDecodeError(f"a {request.type} event on the request queue")
        except ValueError as error:
            log.error("dropping an undecodable request: %s", error)
            await delivery.term()
            return
        response_id = request.response_id
        job_log = response_log(response_id, delivery.traceparent)
        delivered = delivery.num_delivered
        running = self._jobs.held(response_id)
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
        # and before the job is held is remembered by Jobs.on_cancel.
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
        if lease_seq is None:  # routed, but the shared queue (or its taker) has it already
            job_log.info("%s was handed to the shared queue before this worker took it",
                         response_id)
            await delivery.ack()
            return
        if delivered > 1:
            self._metrics.counts.redeliveries += 1
            progress = progress_of(await self._journal.read_log(response_id))
            if progress.finished:
                await delivery.ack()
                return
            if progress.output_token_ids:
                self._metrics.counts.resumes += 1
            job_log.info("resuming %s (delivery %d) at seq %d with %d tokens", response_id,
                         delivered, progress.next_seq, len(progress.output_token_ids))
        else:
            job_log.info("took %s (%s)", response_id, request.model)
        job = Job(request, delivery, self._journal.writer(
            response_id, progress.next_seq, lease_seq,
            on_fenced=lambda: self._jobs.fenced(job),
        ), job_log)
        self._jobs.hold(job)  # held first, so a cancel from now on is seen
        try:
            await self._prepare(job, progress, delivered, prepared, cancel_read)
        except Exception as error:
            # A bug must still end the response (an unanswered request hangs its client); one
            # whose end cannot be written either goes back to the queue, never left here
            # heartbeated. Finished already: writing its end is what failed.
            job_log.exception("starting %s failed", response_id)
            if job.finished:
                await self._jobs.give_back(job, error)
            else:
                await self._jobs.end_failed(job, "server_error",
                                            f"The worker could not start the response: {error}")

    def _prepare_soon(self, request: RequestAccepted) -> asyncio.Future[tuple[Prompt, Any]]:
        """The prompt and sampling parameters, built on a thread."""
        prepared = asyncio.ensure_future(asyncio.to_thread(self._prompt_and_params, request))
        prepared.add_done_callback(_retrieve_error)  # a start that ends early never reads it
        return prepared

    def _prompt_and_params(self, request: RequestAccepted) -> tuple[Prompt, Any]:
        return self._served.build_prompt(request), self._served.sampling_params(request)

    async def _prepare(
        self, job: Job, progress: PriorProgress, delivered: int,
        prepared: asyncio.Future[tuple[Prompt, Any]] | None, cancel_read: asyncio.Future[bool],
    ) -> None:
        request, response_id = job.request, job.request.response_id
        fail = self._jobs.fail
        try:
            if delivered >= self._settings.max_deliver and delivered > 1:
                await fail(job, "worker_lost",
                           f"The response failed after {delivered} delivery attempts.", None)
                return
            tries = self._settings.max_prepare_tries
            if delivered > tries and not progress.prepared:
                await fail(job, "server_error", (
                    f"No worker could prepare this request in {tries} tries (each stopped "
                    "while building its prompt or grammar), so it is not tried again."), None)
                return
            if job.cancelled or self._jobs.cancelled_early(response_id) or await cancel_read:
                await self._jobs.finish_cancelled(job, 0)
                return
            prompt, params = await (prepared or self._prepare_soon(request))
        except InvalidRequest as error:
            await fail(job, error.code, str(error), error.param)
            return
        except ValueError as error:  # the chat template refused the conversation
            await fail(job, "invalid_prompt", str(error), "input")
            return
        messages = request.enable_response_messages
        if messages:
            job.output_token_ids = list(progress.output_token_ids)
        await job.publisher.publish(
            GenerationStarted, worker_id=self._settings.worker_id,
            input_tokens=len(prompt.token_ids),
            resumed_output_tokens=len(progress.output_token_ids),
            prompt_text=prompt.text if messages else None,
            prompt_token_ids=tuple(prompt.token_ids) if messages else None,
        )
        job.events = StepEvents(request, self._served.token_text, prompt.opens_reasoning,
                                self._served.card.tool_call_format)
        if job.finished:  # fenced out while it was being prepared
            return
        self._engine.add(AddRequest(
            response_id, prompt.token_ids, params,
            output_token_ids=progress.output_token_ids,
            prompt_opens_reasoning=prompt.opens_reasoning,
        ))


def _retrieve_error(future: asyncio.Future[Any]) -> None:
    """Marks a background future's error as seen, for a start that returned before it."""
    if not future.cancelled():
        future.exception()
