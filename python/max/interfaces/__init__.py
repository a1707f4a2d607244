"""Request, output and sampling types shared by the pipelines, the offline API and the server
(MAX's ``max.interfaces``)."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The samplers take temperatures and penalties as float32.
_F32_MAX = float(np.finfo(np.float32).max)
_F32_TINY = float(np.finfo(np.float32).tiny)

RequestID = str


def new_request_id() -> RequestID:
    """A fresh, unique request id."""
    return uuid.uuid4().hex


class PipelineTask(str, enum.Enum):
    """What a pipeline does."""

    TEXT_GENERATION = "text_generation"
    EMBEDDINGS_GENERATION = "embeddings_generation"


class GenerationStatus(str, enum.Enum):
    """Where a request stands; the last four end it."""

    ACTIVE = "active"
    END_OF_SEQUENCE = "end_of_sequence"
    MAXIMUM_LENGTH = "maximum_length"
    CANCELLED = "cancelled"

    @property
    def is_done(self) -> bool:
        """Whether the status ends a request (anything but ACTIVE)."""
        return self is not GenerationStatus.ACTIVE


@dataclass
class SamplingParams:
    """How the next token is chosen. ``top_k`` 1 (or ``temperature`` 0) is greedy; ``top_k`` <= 0
    keeps every token; ``top_p`` keeps the smallest set of most likely tokens whose probability
    reaches it; ``min_p`` drops tokens less likely than ``min_p`` times the most likely one.
    Penalties: ``frequency_penalty`` (per occurrence) and ``presence_penalty`` (once) subtract
    from the logits of generated tokens; ``repetition_penalty`` > 1 divides positive logits and
    multiplies negative ones of prompt and generated tokens. Generation stops at ``max_new_tokens``,
    at an EOS token (unless ``ignore_eos``), at one of ``stop_token_ids`` or when the text ends
    in one of ``stop`` (not before ``min_new_tokens``). ``seed`` makes sampling reproducible."""

    top_k: int = -1
    top_p: float = 1.0
    min_p: float = 0.0
    temperature: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_new_tokens: int | None = None
    min_new_tokens: int = 0
    ignore_eos: bool = False
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    detokenize: bool = True
    seed: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first out-of-range (or mistyped) parameter."""
        self._check_types()
        checks = [
            (not (0 <= self.temperature <= _F32_MAX),
             f"temperature must be a number >= 0 within float32's range, got {self.temperature}"),
            (not (0 < self.top_p <= 1), f"top_p must be in (0, 1], got {self.top_p}"),
            (not (0 <= self.min_p <= 1), f"min_p must be in [0, 1], got {self.min_p}"),
            (not (-2 <= self.frequency_penalty <= 2), f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}"),
            (not (-2 <= self.presence_penalty <= 2), f"presence_penalty must be in [-2, 2], got {self.presence_penalty}"),
            (not (_F32_TINY <= self.repetition_penalty <= _F32_MAX),
             f"repetition_penalty must be a number > 0 within float32's normal range "
             f"[{_F32_TINY:.7g}, {_F32_MAX:.7g}], got {self.repetition_penalty}"),
            (self.max_new_tokens is not None and self.max_new_tokens < 0,
             f"max_new_tokens must be >= 0, got {self.max_new_tokens}"),
            (self.min_new_tokens < 0, f"min_new_tokens must be >= 0, got {self.min_new_tokens}"),
            (self.seed is not None and not (0 <= self.seed < 2**64), f"seed must be in [0, 2**64), got {self.seed}"),
            (not -2**63 <= self.top_k < 2**63, f"top_k must be a 64-bit integer, got {self.top_k}"),
            (self.stop_token_ids is not None and not all(0 <= t < 2**63 for t in self.stop_token_ids),
             f"stop_token_ids must be token ids (0 <= id < 2**63), got {self.stop_token_ids}"),
        ]
        for bad, msg in checks:
            if bad:
                raise ValueError(msg)
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop is not None and any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop must be a list of non-empty strings")

    def _check_types(self) -> None:
        """ValueError naming a parameter of the wrong type: integers (not bools or floats) for
        top_k, max_new_tokens, min_new_tokens, seed and stop_token_ids, bools for ignore_eos
        and detokenize, real numbers for the rest."""
        def whole(v: object) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))

        ints = {"top_k": self.top_k, "min_new_tokens": self.min_new_tokens}
        if self.max_new_tokens is not None:
            ints["max_new_tokens"] = self.max_new_tokens
        if self.seed is not None:
            ints["seed"] = self.seed
        for name, v in ints.items():
            if not whole(v):
                raise ValueError(f"{name} must be an integer, got {v!r}")
        if self.stop_token_ids is not None:
            if isinstance(self.stop_token_ids, (str, bytes)) or not hasattr(self.stop_token_ids, "__iter__"):
                raise ValueError(f"stop_token_ids must be a list of token ids, got {self.stop_token_ids!r}")
            bad = [t for t in self.stop_token_ids if not whole(t)]
            if bad:
                raise ValueError(f"stop_token_ids must be integer token ids, got {bad[0]!r}")
        for name in ("ignore_eos", "detokenize"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ValueError(f"{name} must be a number, got {v!r}")

    @property
    def greedy(self) -> bool:
        """Whether sampling picks the most likely token (``top_k=1`` or temperature 0)."""
        return self.top_k == 1 or self.temperature == 0

    @property
    def has_penalties(self) -> bool:
        """Whether any frequency, presence or repetition penalty is in effect."""
        return self.frequency_penalty != 0 or self.presence_penalty != 0 or self.repetition_penalty != 1


@dataclass
class TextGenerationRequestMessage:
    """One chat message."""

    role: str
    content: Any


@dataclass
class TextGenerationRequest:
    """A generation request: a prompt (text or token ids) or chat messages."""

    request_id: RequestID = field(default_factory=new_request_id)
    model_name: str = ""
    prompt: str | Sequence[int] | None = None
    messages: list[Any] | None = None
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    chat_template_options: dict[str, Any] | None = None
    logprobs: int = 0
    echo: bool = False


@dataclass
class LogProbabilities:
    """Log-probabilities of the chosen tokens (and optionally the top alternatives)."""

    token_log_probabilities: list[float] = field(default_factory=list)
    top_log_probabilities: list[dict[int, float]] = field(default_factory=list)


@dataclass
class TextGenerationOutput:
    """What one step produced for a request."""

    request_id: RequestID
    tokens: list[int]
    final_status: GenerationStatus
    log_probabilities: list[LogProbabilities] | None = None

    @property
    def is_done(self) -> bool:
        """Whether this output ends the request."""
        return self.final_status.is_done


@dataclass
class TextGenerationInputs:
    """One step's batch: request id -> context (one replica)."""

    batches: list[dict[RequestID, Any]]
    num_steps: int = 1

    @property
    def batch(self) -> dict[RequestID, Any]:
        """The first (usually only) batch: request id -> context (empty without batches)."""
        return self.batches[0] if self.batches else {}


@dataclass
class EmbeddingsGenerationOutput:
    """An embedding vector."""

    embeddings: np.ndarray


__all__ = [
    "EmbeddingsGenerationOutput", "GenerationStatus", "LogProbabilities", "PipelineTask", "RequestID", "SamplingParams",
    "TextGenerationInputs", "TextGenerationOutput", "TextGenerationRequest", "TextGenerationRequestMessage",
    "new_request_id",
]
