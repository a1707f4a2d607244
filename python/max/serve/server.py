"""Starting and stopping ``max serve``: load the model (text generation or embeddings, as its
architecture says), compile it with one warm-up request, build the app, run uvicorn, print
"Server ready on http://HOST:PORT" once the socket listens. SIGINT/SIGTERM stop accepting
connections, let in-flight requests finish for up to ``shutdown_timeout`` seconds, then cancel
the rest and stop the model worker."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from max.interfaces import PipelineTask
from max.serve.app import create_app
from max.serve.metrics import ServerMetrics
from max.serve.state import ServerState


#: Seconds after the shutdown timeout that uvicorn cuts the connections still open (the
#: requests have ended as aborted by then; this is for their last bytes).
_CUT_AFTER = 5


@dataclass
class ServeSettings:
    """Server settings that are not the pipeline's."""

    host: str = "0.0.0.0"
    port: int = 8000
    served_model_name: str | None = None
    max_queue_size: int | None = None  # requests waiting beyond the batch; default 4 x max_batch_size
    shutdown_timeout: int = 30
    log_level: str = "warning"


def build(config: Any, settings: ServeSettings) -> tuple[Any, Any]:
    """The app and its model worker (None for an embeddings model) for `config`."""
    from max.pipelines import PIPELINE_REGISTRY
    from max.pipelines.lib.model_source import resolve
    from max.pipelines.lib.pipeline import load_pipeline

    mc = config.model
    source = resolve(mc.model_path, mc.weight_path)
    task = PIPELINE_REGISTRY.architecture_for(source).task
    pipeline = load_pipeline(config, task=task)
    name = settings.served_model_name or mc.served_model_name or mc.model_path
    metrics = ServerMetrics()
    state = ServerState(model_name=name, aliases={name, mc.model_path}, metrics=metrics)
    batch = int(getattr(pipeline, "max_batch_size", 32))
    queue = settings.max_queue_size if settings.max_queue_size is not None else 4 * batch
    if queue < 0:
        raise ValueError(f"--max-queue-size must be >= 0, got {queue}")
    worker = None
    if task == PipelineTask.EMBEDDINGS_GENERATION:
        from max.serve.embeddings import EmbeddingService

        pipeline.encode(["warm up"])
        state.embeddings = EmbeddingService(pipeline, capacity=batch + queue)
        state.max_length = int(pipeline.max_seq_length)
    else:
        from max.serve.generation import GenerationService
        from max.serve.scheduler import Scheduler
        from max.serve.worker import ModelWorker

        pipeline.warm_up()
        scheduler = Scheduler(pipeline.kv_manager, pipeline.max_batch_size, config.max_batch_input_tokens,
                              config.enable_chunked_prefill)
        worker = ModelWorker(pipeline, scheduler, on_step=metrics.on_step)
        metrics.worker = worker
        state.generation = GenerationService(pipeline, worker, metrics, capacity=batch + queue)
        state.max_length = int(pipeline.max_length)
    return create_app(state, worker), pipeline


async def _serve(server: Any, host: str, worker: Any = None, shutdown_timeout: float = 30.0) -> None:
    """Runs `server`; once a signal asks it to stop, the requests in flight have
    `shutdown_timeout` seconds to finish, then the model worker ends them as aborted (streams
    get their last chunk with finish_reason "abort" and [DONE]) before uvicorn, whose own limit
    is a little longer, would cut their connections."""
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        port = server.servers[0].sockets[0].getsockname()[1] if server.servers else server.config.port
        print(f"Server ready on http://{host}:{port}", flush=True)
    while not task.done() and not server.should_exit:
        await asyncio.wait({task}, timeout=0.1)
    if not task.done() and worker is not None:
        done, _ = await asyncio.wait({task}, timeout=shutdown_timeout)
        if not done:
            worker.stop(timeout=0)  # (ends every request as cancelled; the app's shutdown joins it)
    await task


def run(config: Any, settings: ServeSettings) -> int:
    """Serves until interrupted; the exit status."""
    import uvicorn

    t0 = time.perf_counter()
    app, pipeline = build(config, settings)
    print(f"[max] {pipeline.source.architecture} on {pipeline.device.label}: loaded and compiled in "
          f"{time.perf_counter() - t0:.2f} s", file=sys.stderr, flush=True)
    level = settings.log_level.lower()
    logging.basicConfig(level=getattr(logging, level.upper(), logging.WARNING))
    server = uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level=level,
                                           timeout_graceful_shutdown=settings.shutdown_timeout + _CUT_AFTER,
                                           access_log=level in ("debug", "info")))
    # uvicorn handles SIGINT/SIGTERM while it serves (graceful shutdown), then raises the signal
    # again for the handlers that were there before: these make that a clean exit.
    stopped: list[int] = []
    previous = {sig: signal.signal(sig, lambda num, frame: stopped.append(num)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        worker = getattr(app.state, "model_worker", None)
        asyncio.run(_serve(server, settings.host, worker, settings.shutdown_timeout))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


__all__ = ["ServeSettings", "build", "run"]
