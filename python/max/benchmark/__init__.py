"""``max benchmark``: load-test an OpenAI-compatible server the way vLLM's
``benchmark_serving`` does (which MAX's command packages): prompts from a dataset (``random`` or
a ShareGPT JSON file), sent at a Poisson rate with bounded concurrency, streamed and timed;
throughput and TTFT/TPOT/ITL/end-to-end latency are printed and optionally saved as JSON.
Modules: ``datasets``, ``client`` (streaming HTTP), ``run`` (the load), ``report``."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from max.benchmark.client import get_json
from max.benchmark.datasets import random_requests, sharegpt_requests
from max.benchmark.report import format_table, summarize, vllm_fields
from max.benchmark.run import payload_for, run_load


def _tokenizer(path: str | None) -> Any:
    if not path or not Path(path).expanduser().exists():
        return None
    from max.pipelines.lib.model_source import resolve
    from max.pipelines.lib.tokenizer_factory import text_tokenizer

    return text_tokenizer(resolve(str(Path(path).expanduser()), []), None)


def main(args: argparse.Namespace) -> int:
    base = (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")
    chat = args.backend.endswith("-chat")
    endpoint = args.endpoint or ("/v1/chat/completions" if chat else "/v1/completions")
    if args.num_prompts < 1:
        raise ValueError(f"--num-prompts must be at least 1, got {args.num_prompts}")
    try:
        models = asyncio.run(get_json(base + "/v1/models"))
    except OSError as e:
        raise RuntimeError(f"cannot reach the server at {base}: {e}") from None
    model = args.model or models["data"][0]["id"]
    tokenizer = _tokenizer(args.tokenizer or model)
    rng = np.random.default_rng(args.seed)
    if args.dataset_name == "random":
        if tokenizer is None:
            raise ValueError("--dataset-name random needs a tokenizer: pass --tokenizer with a local model path")
        out_len = min(args.random_output_len, args.max_output_len or args.random_output_len)
        requests = random_requests(tokenizer, args.num_prompts, args.random_input_len, out_len,
                                   args.random_range_ratio, rng)
    else:
        if not args.dataset_path:
            raise ValueError("--dataset-name sharegpt needs --dataset-path (a ShareGPT-format JSON file)")
        requests = sharegpt_requests(args.dataset_path, tokenizer, args.num_prompts, rng, args.max_output_len)
    payloads = [(payload_for(r, model, chat, args.temperature, args.ignore_eos, tokenizer), r.prompt_len)
                for r in requests]
    print(f"[max benchmark] {len(payloads)} requests to {base}{endpoint} (model {model}), rate {args.request_rate} "
          f"req/s, max concurrency {args.max_concurrency or 'unbounded'}", flush=True)
    results, duration = asyncio.run(run_load(base + endpoint, payloads, args.request_rate, args.burstiness,
                                             args.max_concurrency, args.seed, args.timeout))
    summary = summarize(results, duration)
    print(format_table(summary), flush=True)
    if args.save_result or args.result_filename:
        path = Path(args.result_filename or f"benchmark-{time.strftime('%Y%m%d-%H%M%S')}.json")
        record = dict(summary, **vllm_fields(summary), backend=args.backend, endpoint=endpoint, model=model, base_url=base,
                      dataset_name=args.dataset_name, num_prompts=len(payloads), request_rate=args.request_rate,
                      burstiness=args.burstiness, max_concurrency=args.max_concurrency, date=time.strftime("%F %T"))
        path.write_text(json.dumps(record, indent=2))
        print(f"[max benchmark] results written to {path}")
    return 0 if summary["completed"] else 1


__all__ = ["main"]
