"""The model worker: a dedicated thread that owns the pipeline and the scheduler and runs model
steps back to back while there is work. The HTTP side talks to it through a thread-safe inbox
(``submit``, ``cancel``, ``stop``) and gets each step's new tokens on its event loop (one
``call_soon_threadsafe`` per step), so the event loop never waits on the model and the model
never waits on HTTP, tokenisation or detokenisation."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from max.interfaces import GenerationStatus, LogProbabilities, TextGenerationInputs
from max.pipelines.lib.context import TextContext
from max.serve.scheduler import Scheduler

log = logging.getLogger("max.serve")


@dataclass
class StepOutput:
    """New tokens of one request after one step, whether it is done, and the tokens'
    log-probabilities when the request asked for them."""

    tokens: list[int]
    status: GenerationStatus
    log_probabilities: list[LogProbabilities] | None = None


@dataclass
class Ticket:
    """A request as both sides see it: its context, and the queue its outputs arrive on (an
    ``asyncio.Queue`` of ``StepOutput``s, or an exception when the step failed)."""

    ctx: TextContext
    loop: asyncio.AbstractEventLoop
    outputs: asyncio.Queue = field(default_factory=asyncio.Queue)
    submitted_at: float = field(default_factory=time.perf_counter)


class ModelWorker:
    """Runs `pipeline` steps on its own thread for the submitted requests."""

    def __init__(self, pipeline: Any, scheduler: Scheduler, on_step: Callable[["ModelWorker", int], None] | None = None) -> None:
        self.pipeline = pipeline
        self.scheduler = scheduler
        self.on_step = on_step
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._tickets: dict[str, Ticket] = {}
        self._thread = threading.Thread(target=self._main, name="max-model-worker", daemon=True)
        self._stopping = False
        self.failure: BaseException | None = None

    # -- called from the HTTP side ----------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, ticket: Ticket) -> None:
        self._inbox.put(("add", ticket))

    def cancel(self, request_id: str) -> None:
        self._inbox.put(("cancel", request_id))

    def stop(self, timeout: float = 30.0) -> None:
        """Ends the thread; requests still in flight end with status CANCELLED."""
        self._inbox.put(("stop", None))
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the thread -------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            while not self._stopping:
                self._drain(block=not self.scheduler.has_work)
                if self._stopping:
                    break
                size = self._step() if self.scheduler.has_work else 0
                if self.on_step is not None:
                    self.on_step(self, size)
        except BaseException as e:  # noqa: BLE001 - reported to every waiting request
            log.exception("the model worker stopped")
            self.failure = e
        finally:
            self._abort_all(self.failure)

    def _drain(self, block: bool) -> None:
        while True:
            try:
                kind, item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            if kind == "add":
                self._tickets[item.ctx.request_id] = item
                self.scheduler.add(item.ctx)
            elif kind == "cancel":
                if self._tickets.pop(item, None) is not None:
                    self.scheduler.remove(item)
            elif kind == "stop":
                self._stopping = True
                return

    def _step(self) -> int:
        """One model step; the batch size."""
        batch = self.scheduler.schedule()
        if not batch:
            return 0
        try:
            # several decode steps at once while nobody waits to join the batch
            steps = 1 if self.scheduler.waiting else self.pipeline.decode_steps
            outputs = self.pipeline.execute(TextGenerationInputs([{c.request_id: c for c in batch}], num_steps=steps))
        except Exception as e:  # noqa: BLE001 - the step's requests fail, the server stays up
            log.exception("a model step failed")
            for ctx in batch:
                self.scheduler.finish(ctx)
                ticket = self._tickets.pop(ctx.request_id, None)
                if ticket is not None:
                    self._deliver(ticket.loop, [(ticket, RuntimeError(f"the model step failed: {e}"))])
            return len(batch)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Ticket, Any]]] = defaultdict(list)
        for rid, out in outputs.items():
            ticket = self._tickets.get(rid)
            if ticket is None:
                continue
            if out.final_status.is_done:
                self.scheduler.finish(ticket.ctx)
                del self._tickets[rid]
            by_loop[ticket.loop].append((ticket, StepOutput(list(out.tokens), out.final_status, out.log_probabilities)))
        for loop, items in by_loop.items():
            self._deliver(loop, items)
        return len(batch)

    @staticmethod
    def _deliver(loop: asyncio.AbstractEventLoop, items: list[tuple[Ticket, Any]]) -> None:
        def put() -> None:
            for ticket, item in items:
                ticket.outputs.put_nowait(item)

        try:
            loop.call_soon_threadsafe(put)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def _abort_all(self, error: BaseException | None) -> None:
        tickets, self._tickets = list(self._tickets.values()), {}
        for ticket in tickets:
            self.scheduler.remove(ticket.ctx.request_id)
            item: Any = StepOutput([], GenerationStatus.CANCELLED) if error is None else \
                RuntimeError(f"the model worker stopped: {error}")
            self._deliver(ticket.loop, [(ticket, item)])
        # Requests that arrived after the stop.
        while True:
            try:
                kind, item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if kind == "add":
                self._deliver(item.loop, [(item, StepOutput([], GenerationStatus.CANCELLED))])


__all__ = ["ModelWorker", "StepOutput", "Ticket"]
