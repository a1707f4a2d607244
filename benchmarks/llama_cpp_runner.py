"""The llama.cpp side of benchmarks/llm_cpu.py, run in the interpreter that has llama_cpp
(benchmarks/setup-llama-cpp): prefill and decode timings for one GGUF, as JSON on stdout.

    python llama_cpp_runner.py MODEL.gguf THREADS PROMPT_LENS DECODE_STEPS REPEATS
"""

import json
import statistics
import sys
import time

import numpy as np
from llama_cpp import Llama


def main() -> None:
    path, threads, lens, steps, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    llm = Llama(model_path=path, n_ctx=2048, n_threads=threads, n_threads_batch=threads, n_batch=512, n_ubatch=512,
                verbose=False)
    rng = np.random.default_rng(0)
    llm.eval([int(x) for x in rng.integers(100, 40000, 32)])  # warm up
    out = []
    for n in [int(x) for x in lens.split(",")]:
        prefill, decode = [], []
        for _ in range(reps):
            toks = [int(x) for x in rng.integers(100, 40000, n)]
            llm.reset()
            t = time.perf_counter()
            llm.eval(toks)
            prefill.append(time.perf_counter() - t)
            t = time.perf_counter()
            for _ in range(steps):
                llm.eval([int(rng.integers(100, 40000))])
            decode.append(time.perf_counter() - t)
        out.append({"prompt": n, "prefill_s": statistics.median(prefill), "decode_s": statistics.median(decode)})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
