"""``POST /v1/embeddings`` for encoder models: inputs are tokenised and embedded on one worker
thread (the event loop never runs the model), at most ``capacity`` requests at a time (429
past that). Vectors come back as float lists or base64 of little-endian float32, as OpenAI
encodes them."""

from __future__ import annotations

import asyncio
import base64
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from fastapi import APIRouter

from max.serve.errors import APIError
from max.serve.schemas import EmbeddingRequest
from max.serve.state import ServerState


class EmbeddingService:
    """Embeds inputs with an ``EmbeddingsPipeline`` on a thread of its own."""

    def __init__(self, pipeline: Any, capacity: int) -> None:
        self.pipeline = pipeline
        self.capacity = int(capacity)
        self.in_flight = 0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="max-embeddings")

    def _run(self, inputs: list[Any]) -> tuple[np.ndarray, int]:
        vocab = int(getattr(self.pipeline, "vocab_size", 0) or 0) or 2**63
        limit = 64 * int(getattr(self.pipeline, "max_seq_length", 0) or 512)
        for i, x in enumerate(inputs):
            if isinstance(x, str) and len(x) > limit:
                raise APIError(400, f"input[{i}] is {len(x)} characters long; the model reads at most "
                                    f"{self.pipeline.max_seq_length} tokens", param="input")
            if not isinstance(x, str) and x and (min(x) < 0 or max(x) >= vocab):
                raise APIError(400, f"input[{i}]: token ids must be in [0, {vocab}), got {min(x)}..{max(x)}",
                               param="input")
        try:
            ids = [self.pipeline.tokenize(x) for x in inputs]
        except (ValueError, TypeError) as e:  # (a str that is not valid Unicode: TypeError from tokenizers)
            raise APIError(400, f"input: {e}", param="input") from None
        return self.pipeline.encode(ids), int(sum(len(i) for i in ids))

    async def embed(self, inputs: list[Any]) -> tuple[np.ndarray, int]:
        if self.in_flight >= self.capacity:
            raise APIError(429, f"the server is at capacity ({self.in_flight} requests in flight); retry later",
                           code="queue_full")
        self.in_flight += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, inputs)
        finally:
            self.in_flight -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def embeddings_router(state: ServerState) -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.post("/embeddings")
    async def embeddings(req: EmbeddingRequest) -> dict[str, Any]:
        state.check_model(req.model)
        svc = state.require_embeddings()
        vectors, tokens = await svc.embed(req.inputs())
        if req.dimensions is not None and req.dimensions != vectors.shape[1]:
            raise APIError(400, f"dimensions: this model's embeddings have {vectors.shape[1]}, not {req.dimensions}",
                           param="dimensions")
        data = []
        for i, v in enumerate(vectors):
            v = np.asarray(v, np.float32).reshape(-1)
            emb: Any = base64.b64encode(v.astype("<f4").tobytes()).decode() if req.encoding_format == "base64" \
                else [float(x) for x in v]
            data.append({"object": "embedding", "index": i, "embedding": emb})
        state.metrics.input_tokens.inc(tokens)
        return {"object": "list", "data": data, "model": req.model or state.model_name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    return router


__all__ = ["EmbeddingService", "embeddings_router"]
