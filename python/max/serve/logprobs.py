"""Log-probabilities in OpenAI's shapes. The generation service turns the pipeline's
``LogProbabilities`` into one ``TokenLogProb`` per generated token; the routes render them for
chat (``choices[i].logprobs.content``: token, logprob, bytes, top_logprobs) or for completions
(``choices[i].logprobs``: tokens, token_logprobs, top_logprobs, text_offset). Whole and streamed
answers render the same entries, a streamed one chunk by chunk."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from max.interfaces import LogProbabilities


@dataclass
class TokenLogProb:
    """A generated token, its log-probability and the most likely tokens at its position, most
    likely first (as many as the request asked for)."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]]


def token_log_probs(tokens: Sequence[int], entries: Sequence[LogProbabilities] | None,
                    count: int) -> list[TokenLogProb]:
    """One ``TokenLogProb`` per token of a step's `tokens`, with the pipeline's `entries` for
    them (``TextContext.log_probabilities`` = `count`, so their dicts begin with the `count`
    most likely tokens; the sampled one follows when it is not among them)."""
    if not entries:
        return []
    out = []
    for token, entry in zip(tokens, entries):
        top = list(entry.top_log_probabilities[0].items())[:count]
        out.append(TokenLogProb(int(token), float(entry.token_log_probabilities[0]), top))
    return out


class LogProbRenderer:
    """Renders one choice's ``TokenLogProb``s; `top` is what the request asked for: chat's
    ``top_logprobs`` (0..20) or completions' ``logprobs`` (0..5)."""

    def __init__(self, tokenizer: Any, top: int) -> None:
        self.tokenizer = tokenizer
        self.top = int(top)
        self.offset = 0  # characters of text before the next token (completions' text_offset)

    def _token(self, token_id: int) -> tuple[str, bytes]:
        raw = self.tokenizer.token_bytes(token_id)
        return raw.decode("utf-8", errors="replace"), raw

    def chat(self, items: Sequence[TokenLogProb]) -> dict[str, Any]:
        """``{"content": [{token, logprob, bytes, top_logprobs}, ...]}``."""
        content = []
        for it in items:
            text, raw = self._token(it.token_id)
            top = []
            for tid, lp in it.top[: self.top]:
                t, b = self._token(tid)
                top.append({"token": t, "logprob": lp, "bytes": list(b)})
            content.append({"token": text, "logprob": it.logprob, "bytes": list(raw), "top_logprobs": top})
        return {"content": content}

    def completion(self, items: Sequence[TokenLogProb]) -> dict[str, Any]:
        """``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``: each token's text and
        the character offset where it starts, continuing from the previous call. A
        ``top_logprobs`` dict holds the `top` most likely tokens and the chosen one."""
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for it in items:
            text, _ = self._token(it.token_id)
            top: dict[str, float] = {}
            for tid, lp in it.top[: self.top]:
                top.setdefault(self._token(tid)[0], lp)  # two tokens may read alike: the likelier stays
            top.setdefault(text, it.logprob)
            out["tokens"].append(text)
            out["token_logprobs"].append(it.logprob)
            out["top_logprobs"].append(top)
            out["text_offset"].append(self.offset)
            self.offset += len(text)
        return out


__all__ = ["LogProbRenderer", "TokenLogProb", "token_log_probs"]
