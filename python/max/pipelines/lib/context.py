"""``TextContext``: one request's state in a text-generation pipeline: its tokens (prompt, then
generated), how many of them the KV cache already holds (``start_idx``), which ones the next
step processes (``start_idx:active_idx``; a prompt can be processed in chunks), its sampling
parameters and status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from max.interfaces import GenerationStatus, SamplingParams, new_request_id


@dataclass(eq=False)
class TextContext:
    """A request being generated. Contexts compare (and hash) by identity: each is one request's
    mutable state."""

    max_length: int
    tokens: np.ndarray
    request_id: str = field(default_factory=new_request_id)
    eos_token_ids: set[int] = field(default_factory=set)
    eos_sequences: list[list[int]] = field(default_factory=list)
    log_probabilities: int = 0
    log_probabilities_echo: bool = False
    ignore_eos: bool = False
    json_schema: str | None = None
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    model_name: str = ""
    _matcher: Any = field(default=None, repr=False)
    status: GenerationStatus = GenerationStatus.ACTIVE

    def __post_init__(self) -> None:
        from max.pipelines.lib.logprobs import TOP_LOGPROBS_LIMIT

        lp = self.log_probabilities
        if isinstance(lp, bool) or not isinstance(lp, (int, np.integer)) or not 0 <= lp <= TOP_LOGPROBS_LIMIT:
            raise ValueError(f"log_probabilities must be an integer in [0, {TOP_LOGPROBS_LIMIT}] (the most likely "
                             f"tokens reported beside each token), got {lp!r}")
        if self.log_probabilities_echo:
            raise ValueError("log_probabilities_echo (log-probabilities of the prompt's tokens) is not supported")
        self.tokens = np.asarray(self.tokens, dtype=np.int64).reshape(-1)
        if self.tokens.size == 0:
            raise ValueError("the prompt is empty: at least one token is needed")
        if self.tokens.size > self.max_length:
            raise ValueError(
                f"the prompt has {self.tokens.size} tokens, more than max_length {self.max_length}"
            )
        self.prompt_length = int(self.tokens.size)
        # `tokens` is a view of `_buf`, which has room for more (append: amortised O(1)); a
        # caller that assigns `tokens` itself is noticed at the next append.
        self._buf = self._view = self.tokens
        self._start = 0
        self._active = int(self.tokens.size)
        self.step_count = 0

    # -- the token window -------------------------------------------------------------------

    @property
    def start_idx(self) -> int:
        """Tokens already in the KV cache."""
        return self._start

    @property
    def active_idx(self) -> int:
        """One past the last token the next step processes."""
        return self._active

    @property
    def end_idx(self) -> int:
        """The number of tokens held (prompt and generated)."""
        return int(self.tokens.size)

    @property
    def current_length(self) -> int:
        """The number of tokens held (prompt and generated)."""
        return int(self.tokens.size)

    @property
    def active_length(self) -> int:
        """The number of tokens the next step processes."""
        return self._active - self._start

    @property
    def next_tokens(self) -> np.ndarray:
        """The tokens the next step processes."""
        return self.tokens[self._start : self._active]

    @property
    def all_tokens(self) -> np.ndarray:
        """Every token held: the prompt, then the generated tokens."""
        return self.tokens

    @property
    def prompt_tokens(self) -> np.ndarray:
        """The prompt's tokens."""
        return self.tokens[: self.prompt_length]

    @property
    def generated_tokens(self) -> np.ndarray:
        """The tokens generated so far."""
        return self.tokens[self.prompt_length :]

    @property
    def is_initial_prompt(self) -> bool:
        """Whether part of the prompt is still to be processed."""
        return self._start < self.prompt_length

    @property
    def needs_prefill(self) -> bool:
        """Whether prompt tokens remain to be processed."""
        return self._start < self.prompt_length

    def chunk(self, max_tokens: int) -> None:
        """Limits the next step to at most `max_tokens` of the pending tokens (chunked prefill)."""
        self._active = min(self.end_idx, self._start + max(1, int(max_tokens)))

    def commit(self) -> None:
        """The step ran: its tokens are now cached; the rest (if any) are next."""
        self._start = self._active
        self._active = self.end_idx

    def set_token_indices(self, start_idx: int | None = None, active_idx: int | None = None) -> None:
        """Moves the window: `start_idx` tokens are in the KV cache (e.g. a shared prefix), the
        next step processes up to `active_idx` (default: every remaining token)."""
        start = self._start if start_idx is None else int(start_idx)
        active = self.end_idx if active_idx is None else int(active_idx)
        if not 0 <= start < active <= self.end_idx:
            raise ValueError(f"bad token window [{start}, {active}) for {self.end_idx} tokens")
        self._start, self._active = start, active

    def reset(self) -> None:
        """Nothing is cached any more (the request was preempted): the next steps process every
        token again, prompt and generated, before the next one is sampled."""
        self._start, self._active = 0, self.end_idx

    @property
    def matcher(self) -> Any:
        """The structured-output matcher of `json_schema`, once one is set (``set_matcher``)."""
        return self._matcher

    def set_matcher(self, matcher: Any) -> None:
        """Gives the context a compiled matcher of its `json_schema` (the pipeline compiles one
        otherwise)."""
        self._matcher = matcher

    def __getstate__(self) -> dict[str, Any]:
        # copies and pickles carry the tokens alone: no spare room, none shared with this one
        # (and no matcher: the pipeline compiles the schema again)
        state = dict(self.__dict__)
        state["_buf"] = state["_view"] = None
        state["_matcher"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._buf = self._view = self.tokens

    def append(self, token: int) -> None:
        """Adds a generated token; it is the next step's input."""
        self.extend([token])

    def extend(self, tokens: list[int]) -> None:
        """Adds generated tokens, as many ``append`` calls would."""
        n, m = int(self.tokens.size), len(tokens)
        if self.tokens is not self._view or n + m > self._buf.size:
            room = np.empty(max(n + m, min(2 * n, self.max_length), 16), np.int64)
            room[:n] = self.tokens
            self._buf = room
        self._buf[n : n + m] = tokens
        self.tokens = self._view = self._buf[: n + m]
        self._active = n + m
        self.step_count += m

    # -- status -----------------------------------------------------------------------------

    @property
    def is_done(self) -> bool:
        """Whether generation has finished (its status is no longer active)."""
        return self.status.is_done

    @property
    def min_tokens(self) -> int:
        """The fewest new tokens to generate before a stop may end the request."""
        return self.sampling_params.min_new_tokens

    def __repr__(self) -> str:
        return (f"TextContext({self.request_id!r}, prompt={self.prompt_length}, generated="
                f"{self.tokens.size - self.prompt_length}, cached={self._start}, status={self.status.value})")


@dataclass
class EmbeddingContext:
    """A request for an embedding: its tokens."""

    tokens: np.ndarray
    request_id: str = field(default_factory=new_request_id)
    model_name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


__all__ = ["EmbeddingContext", "TextContext"]
