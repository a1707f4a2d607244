"""``max benchmark``: flags in the style of vLLM's ``benchmark_serving`` (which MAX's command
packages) and the handler that runs ``max.benchmark`` against a server."""

from __future__ import annotations

import argparse
from typing import Any


def add_benchmark_parser(sub: Any) -> None:
    b = sub.add_parser("benchmark", help="load-test an OpenAI-compatible server (throughput, TTFT, TPOT, ITL)",
                       description="Send prompts from a dataset to a running server (vLLM benchmark_serving style) and "
                                   "report request/input/output throughput and TTFT, TPOT, ITL and end-to-end latency "
                                   "(mean, median, P90, P99), as text and optionally JSON.")
    t = b.add_argument_group("server")
    t.add_argument("--backend", choices=["modular", "modular-chat", "vllm", "openai", "openai-chat"],
                   default="modular", help="modular/vllm/openai: /v1/completions; *-chat: /v1/chat/completions")
    t.add_argument("--base-url", default=None, help="server URL (default http://HOST:PORT)")
    t.add_argument("--host", default="127.0.0.1")
    t.add_argument("--port", type=int, default=8000)
    t.add_argument("--endpoint", default=None, help="route (default from --backend)")
    t.add_argument("--model", default=None, help="model name to send (default: the server's first model)")
    t.add_argument("--tokenizer", default=None,
                   help="a model path (GGUF or HF directory) whose tokenizer counts and builds prompts "
                        "(default: --model when it is a local path)")
    d = b.add_argument_group("dataset")
    d.add_argument("--dataset-name", choices=["sharegpt", "random"], default="sharegpt")
    d.add_argument("--dataset-path", default=None, help="ShareGPT-format JSON file (for --dataset-name sharegpt)")
    d.add_argument("--num-prompts", type=int, default=500)
    d.add_argument("--random-input-len", type=int, default=1024)
    d.add_argument("--random-output-len", type=int, default=128)
    d.add_argument("--random-range-ratio", type=float, default=0.0,
                   help="lengths are drawn uniformly in [len * (1 - r), len * (1 + r)]")
    d.add_argument("--max-output-len", type=int, default=None, help="cap on each request's max_tokens")
    d.add_argument("--seed", type=int, default=0)
    r = b.add_argument_group("load")
    r.add_argument("--request-rate", type=float, default=float("inf"),
                   help="requests per second, Poisson arrivals (default inf: all at once)")
    r.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the gaps (1 = Poisson)")
    r.add_argument("--max-concurrency", type=int, default=None, help="most requests in flight at once")
    r.add_argument("--ignore-eos", action="store_true", help="ask for exactly max_tokens tokens")
    r.add_argument("--temperature", type=float, default=0.0)
    r.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    o = b.add_argument_group("output")
    o.add_argument("--save-result", action="store_true", help="write the results as JSON")
    o.add_argument("--result-filename", default=None, help="JSON path (default benchmark-<time>.json)")
    o.add_argument("--disable-tqdm", action="store_true", help="(accepted for compatibility; no progress bar)")


def run_benchmark(args: argparse.Namespace) -> int:
    from max.benchmark import main as bench_main

    return bench_main(args)


__all__ = ["add_benchmark_parser", "run_benchmark"]
