"""bf16 products with few rows (decode's GEMVs) on the GPU at the projection shapes of
Llama-3.2-1B and Llama-3-8B, M = 1 and 8, as a decode step runs them: a linear layer
`x @ W.T` with W [N, K] as stored (`gpu_us`: the engine reads W directly, a warp per row of W)
beside torch's `x @ W.T` (cuBLAS), and the product with a [K, N] matrix (`kn_gpu_us`: the
split-K kernels of gemm_skinny.cu). GPU time per call (gpu_timing.py: the host out of the way,
as a replayed CUDA graph sees it), the weight-read bandwidth (K * N * 2 bytes / time) and that
as a fraction of the device's copy rate measured in the same run (a 1 GiB device-to-device
copy). Successive timed calls read different copies of the weight, more of them than the L2
cache holds. Each result is checked against torch in float32. Needs a GPU and torch.

    python benchmarks/gpu_gemv.py [--shapes 8b.q,8b.down] [--rows 1] [--variants "default;launch.pdl=0"]

--variants: ';'-separated variants, each 'default' or a tuning spec (docs/configuration.md)
applied with max.tuning.override around the W [N, K] product's load and timing, each variant
re-timed in the same process; the JSON then goes to gpu_gemv_variants-<device>.json.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np

from common import check_tuning, write
from gpu_timing import Timer, copy_rate_gbps, our_stream
from max import driver, engine, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

# (K, N): rows of B (the input features) and columns (the output features).
SHAPES = {
    "1b.q": (2048, 2048), "1b.kv": (2048, 512), "1b.gate": (2048, 8192), "1b.down": (8192, 2048),
    "1b.lm_head": (2048, 128256),
    "8b.q": (4096, 4096), "8b.kv": (4096, 1024), "8b.gate": (4096, 14336), "8b.down": (14336, 4096),
    "8b.lm_head": (4096, 128256),
}
ROWS = [1, 8]
ROTATE_BYTES = 320 << 20  # weight copies cycled through by the timed calls: beyond any L2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated names (default: all)")
    ap.add_argument("--variants", default=None, help="'default;SPEC;...', SPEC a tuning spec")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)), help="rows of x (default: 1,8)")
    args = ap.parse_args()
    shapes = {name: SHAPES[name] for name in args.shapes.split(",")}
    variants = [(v, "" if v == "default" else v) for v in args.variants.split(";")] if args.variants else [("", "")]
    check_tuning(spec for _, spec in variants)
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()

    def sync() -> None:
        torch.cuda.synchronize()
        gpu.synchronize()

    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    stream, timer = our_stream(gpu), Timer(torch)
    side = torch.cuda.Stream()
    copy_gbps = copy_rate_gbps(gpu, sync)

    rows = []
    gref = DeviceRef.GPU()
    for (name, (k, n)), m in itertools.product(shapes.items(), [int(r) for r in args.rows.split(",")]):
        ta = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        tw = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        ref = ta.float() @ tw.float().T
        copies = [tw] + [tw.clone() for _ in range(ROTATE_BYTES // (k * n * 2))]
        a = driver.Buffer.from_dlpack(ta)
        row = {"shape": name, "m": m, "k": k, "n": n}
        # (label, tuning spec, weight layout given to the engine, graph body): W [N, K] per
        # variant, then W^T [K, N] (the default tuning)
        nt = lambda x, w: ops.matmul(x, ops.transpose(w, 0, 1))  # noqa: E731
        cases = [((f"{v}:" if args.variants else ""), spec, copies, nt) for v, spec in variants]
        cases.append(("kn_", "", [t.T.contiguous() for t in copies], ops.matmul))
        for label, spec, weights, body in cases:
            shape_w = tuple(weights[0].shape)
            with Graph("gemv", input_types=[TensorType(DType.bfloat16, (m, k), gref),
                                            TensorType(DType.bfloat16, shape_w, gref)]) as g:
                g.output(body(*g.inputs))
            bufs = [driver.Buffer.from_dlpack(t) for t in weights]
            with tuning.override(spec):
                model = session.load(g)
                (out,) = model.execute(a, bufs[0])
                err = (torch.from_dlpack(out).float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
                cyc = itertools.cycle(bufs)
                t = timer(stream, lambda: model.execute(a, next(cyc)))
            gbps = k * n * 2 / t / 1e9
            row |= {f"{label}gpu_us": round(t * 1e6, 1), f"{label}of_copy_rate": round(gbps / copy_gbps, 3),
                    f"{label}rel_err": float(f"{err:.2e}")}
            del bufs, cyc, weights
        tws = itertools.cycle(copies)
        theirs = timer(side, lambda: ta @ next(tws).T)
        row |= {"torch_gpu_us": round(theirs * 1e6, 1),
                "torch_of_copy_rate": round(k * n * 2 / theirs / 1e9 / copy_gbps, 3),
                "device_copy_GBps": round(copy_gbps, 1)}
        rows.append(row)
        print(rows[-1], flush=True)
        del copies, tws
    write("gpu_gemv_variants" if args.variants else "gpu_gemv", torch.cuda.get_device_name(), rows,
          " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
