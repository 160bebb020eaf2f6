"""Every response a worker holds, from the delivery it takes to the job's end: the held
jobs, the room left for more, the cancels seen before their job was held, and every way a
job ends (finished, cancelled, failed, handed back, fenced out, drained)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any

from events import GenerationFailed, GenerationFinished, Usage
from events.response_object import length_incomplete_details
from workers.engine_loop import EngineLoop
from workers.job import Job
from workers.output.step_events import usage_of

# The worker's own logger: a job's end reads as the worker's.
log = logging.getLogger("spate.worker")

# Cancels of responses with no job here that are remembered: a start reads the stored
# cancels and holds its job within milliseconds, so only the latest matter.
EARLY_CANCELS_KEPT = 1024


class Jobs:
    """The jobs of one worker, keyed by response id. A job is held from the moment its
    start has taken its lease until it ends. At most `bound` deliveries are held or still
    starting: those starting count too, or a queue's loop would fetch up to the bound
    again before any of them is held."""

    def __init__(self, engine: EngineLoop, bound: int) -> None:
        self._engine = engine
        self._bound = bound
        self._held: dict[str, Job] = {}
        # Deliveries taken and not yet started (their job is held once its start has read
        # the log, or never).
        self._starting = 0
        self._room = asyncio.Event()
        # Cancels seen for responses with no job here, newest last (see on_cancel); a
        # start takes its own out (cancelled_early).
        self._early_cancels: OrderedDict[str, bool] = OrderedDict()
        # Ends that run on their own (settling, handing back), kept from collection.
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- holding -----------------------------------------------------------------------

    def held(self, response_id: str) -> Job | None:
        return self._held.get(response_id)

    def hold(self, job: Job) -> None:
        """Held from now on, so a cancel is seen by the job rather than remembered."""
        self._held[job.request.response_id] = job

    def generating(self) -> int:
        """Responses still generating here (not those only settling their ack): the load
        the routers weigh."""
        return sum(not job.finished for job in self._held.values())

    async def in_progress(self) -> None:
        """Tell NATS that every held delivery is still being worked on."""
        for job in list(self._held.values()):
            await job.delivery.in_progress()

    def _release(self, job: Job) -> None:
        if self._held.get(job.request.response_id) is job:
            del self._held[job.request.response_id]
        self._room.set()

    # -- room --------------------------------------------------------------------------

    def room(self) -> int:
        """How many more deliveries may be taken now."""
        return self._bound - len(self._held) - self._starting

    async def wait_for_room(self, timeout_s: float) -> None:
        """Until a job is released or a start ends, or `timeout_s` has passed."""
        self._room.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._room.wait(), timeout_s)

    def starting(self, count: int) -> None:
        """`count` deliveries were taken; each start calls `started` when it returns."""
        self._starting += count

    def started(self) -> None:
        self._starting -= 1
        self._room.set()

    # -- cancels -----------------------------------------------------------------------

    def on_cancel(self, response_id: str) -> None:
        job = self._held.get(response_id)
        if job is None:
            # Perhaps one this worker is starting, its cancel check already sent: kept
            # for the start to see (the latest few only; any other worker's response is
            # just as likely).
            self._early_cancels[response_id] = True
            while len(self._early_cancels) > EARLY_CANCELS_KEPT:
                self._early_cancels.popitem(last=False)
        elif not job.cancelled:
            job.cancelled = True
            self._engine.cancel(response_id)

    def cancelled_early(self, response_id: str) -> bool:
        """Whether a cancel came before the job was held; forgotten once asked."""
        return self._early_cancels.pop(response_id, False)

    # -- ends --------------------------------------------------------------------------

    async def finish(self, job: Job, output: Any, raw_output_text: str | None) -> None:
        """Publish the end the engine reported; the job settles on its own."""
        usage = usage_of(output)
        await job.publisher.publish(GenerationFinished, finish_reason=output.finish_reason,
                                    usage=usage, raw_output_text=raw_output_text)
        job.log.info("finished %s: %s, %d output tokens", output.request_id,
                     output.finish_reason, output.num_output_tokens)
        if output.finish_reason == "length":
            # The response's incomplete_details say the same; the operator sees it here.
            details = length_incomplete_details(job.request.sampling.max_output_tokens, usage)
            if "message" in details:
                job.log.info("%s: %s", output.request_id, details["message"])
        self._spawn(self.settle(job))

    async def finish_cancelled(self, job: Job, input_tokens: int) -> None:
        job.finished = True
        await job.publisher.publish(
            GenerationFinished, finish_reason="cancelled",
            usage=Usage(input_tokens=input_tokens, output_tokens=0),
        )
        await self.settle(job)

    async def fail(self, job: Job, code: str, message: str, param: str | None = None) -> None:
        job.finished = True
        await job.publisher.publish(GenerationFailed, code=code, message=message, param=param)
        await self.settle(job)

    async def end_failed(self, job: Job, code: str, message: str) -> None:
        """`fail`, or hand the request back when even its failure cannot be written."""
        try:
            await self.fail(job, code, message)
        except Exception as error:
            await self.give_back(job, error)

    async def settle(self, job: Job) -> None:
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

    async def give_back(self, job: Job, error: BaseException) -> None:
        job.finished = True
        if job.publisher.fenced:  # another worker holds it now: neither ack nor hand back
            self._release(job)
            return
        job.log.warning("handing %s back to the queue: %s", job.request.response_id, error)
        with contextlib.suppress(Exception):
            await job.delivery.nak(delay=1)
        self._release(job)

    def publish_failed(self, job: Job, error: BaseException) -> None:
        """An event of the running job could not be written: stop it and hand it back."""
        self._engine.cancel(job.request.response_id)
        self._spawn(self.give_back(job, error))

    def fenced(self, job: Job) -> None:
        """Another worker took the response over while this one was stalled (frozen past
        the ack wait): stop its sequence and free its resources. The delivery is neither
        acked nor handed back: it belongs to the new holder."""
        job.finished = True
        self._engine.cancel(job.request.response_id)
        self._release(job)

    def engine_failed(self, request_ids: list[str], error: BaseException) -> None:
        for request_id in request_ids:
            job = self._held.get(request_id)
            if job is not None and not job.finished:
                self._spawn(self.end_failed(job, "engine_error", f"The model failed: {error}"))

    async def drain(self, timeout_s: float) -> None:
        """Let running responses finish; hand the rest back to the queue for another worker."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._held and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        for job in list(self._held.values()):
            self._engine.cancel(job.request.response_id)
            with contextlib.suppress(Exception):
                await job.publisher.flush()
                await job.delivery.nak()
            self._held.pop(job.request.response_id, None)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
