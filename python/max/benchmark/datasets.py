"""Benchmark prompts: ``random`` (prompts of a given token length, drawn from the tokenizer's
vocabulary, as vLLM's random dataset) and ``sharegpt`` (the first human turn of each
conversation in a ShareGPT-format JSON file, with the reply's token length as the output
length; too short or too long pairs are skipped, as vLLM's benchmark does)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class BenchRequest:
    """One request to send: its prompt (text or token ids), its length and max_tokens."""

    prompt: str | list[int]
    prompt_len: int
    output_len: int


def random_requests(tokenizer: Any, num: int, input_len: int, output_len: int, range_ratio: float,
                    rng: np.random.Generator) -> list[BenchRequest]:
    """`num` prompts of random tokens. Lengths are uniform in `len * [1 - r, 1 + r]`. Each prompt
    is decoded to text and encoded again, and sent as the token ids that gives, so the server
    sees exactly the counted length."""
    if input_len < 1 or output_len < 1:
        raise ValueError("--random-input-len and --random-output-len must be positive")
    if not 0 <= range_ratio < 1:
        raise ValueError(f"--random-range-ratio must be in [0, 1), got {range_ratio}")
    vocab = int(tokenizer.vocab_size)
    special = set(getattr(tokenizer, "eos_token_ids", set()) or set())
    out = []
    for _ in range(num):
        n = int(rng.integers(max(1, int(input_len * (1 - range_ratio))), int(input_len * (1 + range_ratio)) + 1))
        m = int(rng.integers(max(1, int(output_len * (1 - range_ratio))), int(output_len * (1 + range_ratio)) + 1))
        ids = [int(t) for t in rng.integers(0, vocab, n) if int(t) not in special]
        text = tokenizer.decode_sync(ids, skip_special_tokens=True)
        ids = [int(t) for t in tokenizer.encode_sync(text, add_special_tokens=False)][:n]
        out.append(BenchRequest(ids, len(ids), m))
    return out


def _first_exchange(entry: Any) -> tuple[str, str] | None:
    turns = entry.get("conversations") or entry.get("conversation") if isinstance(entry, dict) else None
    if not isinstance(turns, list) or len(turns) < 2:
        return None
    first, second = turns[0], turns[1]
    value = lambda t: t.get("value", t.get("content")) if isinstance(t, dict) else None  # noqa: E731
    q, a = value(first), value(second)
    return (q, a) if isinstance(q, str) and isinstance(a, str) else None


def sharegpt_requests(path: str | Path, tokenizer: Any, num: int, rng: np.random.Generator,
                      max_output_len: int | None = None) -> list[BenchRequest]:
    """Up to `num` requests from a ShareGPT JSON file, in shuffled order. Pairs with a prompt
    under 4 tokens or an answer under 4, or a prompt over 1024 or a total over 2048 tokens,
    are skipped."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"--dataset-path: no such file {str(p)!r}")
    try:
        data = json.loads(p.read_text())
    except ValueError as e:
        raise ValueError(f"--dataset-path: {p} is not JSON ({e})") from None
    if not isinstance(data, list):
        raise ValueError(f"--dataset-path: {p} is not a ShareGPT list of conversations")
    pairs = [x for x in (_first_exchange(e) for e in data) if x is not None]
    out: list[BenchRequest] = []
    for i in rng.permutation(len(pairs)):
        if len(out) == num:
            break
        prompt, answer = pairs[int(i)]
        n = len(tokenizer.encode_sync(prompt, add_special_tokens=False)) if tokenizer else len(prompt.split())
        m = len(tokenizer.encode_sync(answer, add_special_tokens=False)) if tokenizer else len(answer.split())
        if max_output_len is not None:
            m = min(m, max_output_len)
        if n < 4 or m < 4 or n > 1024 or n + m > 2048:
            continue
        out.append(BenchRequest(prompt, n, m))
    if not out:
        raise ValueError(f"--dataset-path: {p} has no usable conversation")
    return out


__all__ = ["BenchRequest", "random_requests", "sharegpt_requests"]
