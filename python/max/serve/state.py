"""What the routes share: the served model's names, its services (text generation or
embeddings) and the metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from max.serve.errors import APIError
from max.serve.metrics import ServerMetrics


@dataclass
class ServerState:
    model_name: str
    aliases: set[str]
    metrics: ServerMetrics
    max_length: int | None = None
    generation: Any = None  # GenerationService
    embeddings: Any = None  # EmbeddingService
    created: int = field(default_factory=lambda: int(time.time()))

    def check_model(self, name: str | None) -> None:
        """A 404 unless `name` is empty or names the served model."""
        if name and name not in self.aliases:
            raise APIError(404, f"the model {name!r} does not exist; this server serves {self.model_name!r}",
                           param="model", code="model_not_found")

    def require_generation(self) -> Any:
        if self.generation is None:
            raise APIError(400, f"{self.model_name!r} is an embeddings model: use /v1/embeddings", param="model")
        return self.generation

    def require_embeddings(self) -> Any:
        if self.embeddings is None:
            raise APIError(400, f"{self.model_name!r} does not produce embeddings", param="model")
        return self.embeddings


__all__ = ["ServerState"]
