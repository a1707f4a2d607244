"""Benchmark results: per-request timings in, vLLM ``benchmark_serving``-style summary out
(request, input and output throughput; TTFT, TPOT, ITL and end-to-end latency as mean, median,
std, P90, P95, P99 in milliseconds), printed as a table and as a JSON-ready dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RequestResult:
    """One request's outcome. Times in seconds from sending it: `ttft` to the first content
    chunk, `latency` to the last; `itl` are the gaps between content chunks."""

    ok: bool
    prompt_len: int = 0
    output_len: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    error: str = ""

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first."""
        return (self.latency - self.ttft) / (self.output_len - 1) if self.output_len > 1 else None


PERCENTILES = (50, 90, 95, 99)


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, np.float64) * 1000 if values else np.zeros(1)
    out = {"mean": float(a.mean()), "median": float(np.median(a)), "std": float(a.std())}
    for p in PERCENTILES[1:]:
        out[f"p{p}"] = float(np.percentile(a, p))
    return out


def summarize(results: list[RequestResult], duration: float) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    inp = sum(r.prompt_len for r in ok)
    outp = sum(r.output_len for r in ok)
    errors: dict[str, int] = {}
    for r in results:
        if not r.ok:
            errors[r.error] = errors.get(r.error, 0) + 1
    return {
        "duration_s": duration,
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "errors": errors,
        "total_input_tokens": inp,
        "total_output_tokens": outp,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "input_throughput": inp / duration if duration > 0 else 0.0,
        "output_throughput": outp / duration if duration > 0 else 0.0,
        "total_token_throughput": (inp + outp) / duration if duration > 0 else 0.0,
        "ttft_ms": _stats([r.ttft for r in ok]),
        "tpot_ms": _stats([t for r in ok if (t := r.tpot) is not None]),
        "itl_ms": _stats([g for r in ok for g in r.itl]),
        "e2el_ms": _stats([r.latency for r in ok]),
    }


def vllm_fields(s: dict[str, Any]) -> dict[str, float]:
    """The summary's figures under the flat names of vLLM's ``benchmark_serving`` result JSON
    (``duration``, ``median_ttft_ms``, ``p99_tpot_ms``, ...), which scripts written for vLLM's
    (and MAX's) files read; the nested ``ttft_ms: {median: ...}`` form stays beside them."""
    out = {"duration": s["duration_s"]}
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat, value in s[f"{metric}_ms"].items():
            out[f"{stat}_{metric}_ms"] = value
    return out


def format_table(s: dict[str, Any]) -> str:
    w = 50
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=w, c="=")]
    rows = [("Successful requests:", s["completed"]), ("Failed requests:", s["failed"]),
            ("Benchmark duration (s):", f"{s['duration_s']:.2f}"),
            ("Total input tokens:", s["total_input_tokens"]), ("Total generated tokens:", s["total_output_tokens"]),
            ("Request throughput (req/s):", f"{s['request_throughput']:.2f}"),
            ("Input token throughput (tok/s):", f"{s['input_throughput']:.2f}"),
            ("Output token throughput (tok/s):", f"{s['output_throughput']:.2f}"),
            ("Total token throughput (tok/s):", f"{s['total_token_throughput']:.2f}")]
    lines += [f"{k:<40}{v:<10}" for k, v in rows]
    titles = {"ttft_ms": "Time to First Token", "tpot_ms": "Time per Output Token (excl. 1st token)",
              "itl_ms": "Inter-token Latency", "e2el_ms": "End-to-end Latency"}
    short = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2el_ms": "E2EL"}
    for key, title in titles.items():
        lines.append("{s:{c}^{n}}".format(s=f" {title} ", n=w, c="-"))
        st = s[key]
        lines.append(f"{'Mean ' + short[key] + ' (ms):':<40}{st['mean']:<10.2f}")
        lines.append(f"{'Median ' + short[key] + ' (ms):':<40}{st['median']:<10.2f}")
        lines.append(f"{'Std ' + short[key] + ' (ms):':<40}{st['std']:<10.2f}")
        for p in PERCENTILES[1:]:
            lines.append(f"{f'P{p} ' + short[key] + ' (ms):':<40}{st[f'p{p}']:<10.2f}")
    for err, n in s["errors"].items():
        lines.append(f"error x{n}: {err}")
    lines.append("=" * w)
    return "\n".join(lines)


__all__ = ["RequestResult", "format_table", "summarize", "vllm_fields"]
