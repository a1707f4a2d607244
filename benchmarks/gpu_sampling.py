"""Next-token sampling on the GPU (sample_tokens, sampling.cu) at a Llama-3 vocabulary: greedy,
temperature alone, top-k 50, top-p 0.9 and both, at batch 1, 8 and 64, beside torch doing the
same choice in the same process (greedy: argmax; temperature: softmax, multinomial; top-k:
topk, softmax, multinomial; top-p: sort, softmax, cumsum, mask, multinomial). GPU time per call with the host out of the way (gpu_timing.py).
JSON to benchmarks/results/.

    python benchmarks/gpu_sampling.py [--vocab 128256] [--batch 1,8,64]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from common import write
from gpu_timing import Timer, our_stream
from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType
from max.nn.sampling_ops import sample_tokens

MODES = {"greedy": (0.0, 1, 1.0), "temperature=0.8": (0.8, -1, 1.0), "top_k=50": (0.8, 50, 1.0), "top_p=0.9": (0.8, -1, 0.9),
         "top_k=50,top_p=0.9": (0.8, 50, 0.9)}


def torch_choice(torch, logits, temp: float, k: int, p: float):
    if temp <= 0 or k == 1:
        return logits.argmax(-1)
    z = logits / temp
    if k <= 0 and p >= 1:
        return torch.multinomial(torch.softmax(z, -1), 1).squeeze(-1)
    if k > 1:
        vals, idx = torch.topk(z, k, dim=-1)
        if p < 1:
            probs = torch.softmax(vals, -1)
            keep = probs.cumsum(-1) - probs < p
            vals = vals.masked_fill(~keep, float("-inf"))
        return idx.gather(-1, torch.multinomial(torch.softmax(vals, -1), 1)).squeeze(-1)
    vals, idx = torch.sort(z, dim=-1, descending=True)
    probs = torch.softmax(vals, -1)
    keep = probs.cumsum(-1) - probs < p
    choice = torch.multinomial(torch.softmax(vals.masked_fill(~keep, float("-inf")), -1), 1)
    return idx.gather(-1, choice).squeeze(-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--batch", default="1,8,64")
    args = ap.parse_args()
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()
    ref = DeviceRef.from_device(gpu)
    types = [TensorType(DType.float32, ["rows", args.vocab], ref), TensorType(DType.float32, ["rows"], ref),
             TensorType(DType.int64, ["rows"], ref), TensorType(DType.float32, ["rows"], ref),
             TensorType(DType.float32, ["rows"], ref), TensorType(DType.uint64, ["rows"], ref)]
    model = engine.InferenceSession(devices=[driver.CPU(), gpu]).load(
        Graph("sample", lambda x, t, k, p, mp, s: sample_tokens(x, t, k, p, mp, s), input_types=types))
    stream, timer = our_stream(gpu), Timer(torch)
    rng = np.random.default_rng(0)
    rows = []
    for batch in [int(b) for b in args.batch.split(",")]:
        logits = (rng.standard_normal((batch, args.vocab)) * 3).astype(np.float32)
        x = driver.Buffer.from_numpy(logits).to(gpu)
        tx = torch.from_numpy(logits).cuda()
        for name, (temp, k, p) in MODES.items():
            put = lambda a: driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu)  # noqa: E731
            params = [put(np.full(batch, temp, np.float32)), put(np.full(batch, k, np.int64)),
                      put(np.full(batch, p, np.float32)), put(np.zeros(batch, np.float32)),
                      put(np.arange(batch, dtype=np.uint64) + 7)]
            got = model.execute(x, *params)[0].to(driver.CPU()).to_numpy()
            if temp <= 0:
                assert (got == logits.argmax(-1)).all(), "greedy picks differ from numpy's argmax"
            ours = timer(stream, lambda: model.execute(x, *params))
            side = torch.cuda.Stream()
            theirs = timer(side, lambda: torch_choice(torch, tx, temp, k, p))
            rows.append({"batch": batch, "vocab": args.vocab, "mode": name, "us": round(ours * 1e6, 2),
                         "torch_us": round(theirs * 1e6, 2), "speedup_vs_torch": round(theirs / ours, 2)})
            print(rows[-1], flush=True)
    write("gpu_sampling", torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
