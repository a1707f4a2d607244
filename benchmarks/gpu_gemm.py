"""GEMM on the GPU through max.engine against torch.matmul (cuBLAS) in the same process, timed
with CUDA events after warm-up (median of --reps calls), cuBLAS and ours alternating --rounds
times (the ratio is the median of the per-round ratios, with its min and max). bf16 and f16:
8192^3, 4096^3, M in {1, 16, 128, 2048} x 4096x4096 and x11008, and the decode batches of a
Llama-3-8B layer (M = 32 and 64 by K x N = 4096x6144, 4096x4096, 4096x14336, 14336x4096). Each
shape in both layouts (--layouts): b, C = A @ B with B [K, N]; wt, C = A @ W^T with W [N, K] as
a linear layer stores it (cuBLAS gets the same transposed operand). JSON to benchmarks/results/.

    python benchmarks/gpu_gemm.py
    python benchmarks/gpu_gemm.py --variants "default;gemm.cluster=1;gemm.bn=128,gemm.splitk=2" \
        --shapes 8192x8192x8192,128x4096x4096 --dtypes bf16
    python benchmarks/gpu_gemm.py --variants "default;gemm.bm=128" --layouts wt --dtypes bf16 \
        --shapes 32x4096x6144,64x4096x6144,64x4096x4096,64x4096x14336,64x14336x4096

--variants: ';'-separated variants, each 'default' or a tuning spec (','-separated knob=value,
see docs/configuration.md) applied with max.tuning.override around the variant's load and
timing; our side is re-timed per variant, in the same process, each with a freshly loaded model;
cuBLAS once per shape. --shapes: MxKxN list (default: all).
'--variants sweep' runs the preset SWEEP below. With --variants the JSON goes to
gpu_gemm_variants-<device>.json.
"""

import argparse
import statistics
import sys

from common import check_tuning, cuda_time, write
from max import driver, engine, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops


# --variants sweep: the Hopper GEMM's knobs one at a time against the default
# (gemm.min_m=256: M < 256 back on the small-M kernels, as before gemm_sm90p; gemm.min_m=128:
# as before the 64-row tile; gemm.bm: the row tile forced either way).
SWEEP = ";".join([
    "default",
    "gemm.cluster=1",
    "gemm.persistent=0",
    "gemm.bn=128",
    "gemm.bn=256",
    "gemm.tail=0",
    "gemm.group_m=8",
    "gemm.group_m=32",
    "gemm.splitk=1",
    "gemm.min_m=256",
    "gemm.bm=64",
    "gemm.bm=128",
    "gemm.bm=64,gemm.bn=64",
    "gemm.min_m=128",
])


def parse_variants(spec):
    """';'-separated variants -> [(label, tuning spec)]; 'default' is the empty spec."""
    if spec == "sweep":
        spec = SWEEP
    variants = []
    for v in spec.split(";"):
        v = v.strip()
        if v:
            variants.append((v, "" if v == "default" else v))
    check_tuning(s for _, s in variants)
    return variants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=None, help="'sweep', or 'default;SPEC;SPEC...', SPEC a tuning spec (gemm.bn=128,gemm.splitk=2)")
    ap.add_argument("--shapes", default=None, help="MxKxN,MxKxN... (default: all)")
    ap.add_argument("--dtypes", default="bf16,f16")
    ap.add_argument("--layouts", default="b,wt", help="b (A @ B, B [K, N]) and/or wt (A @ W^T, W [N, K])")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    variants = parse_variants(args.variants) if args.variants else [("default", "")]
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    shapes = [(8192, 8192, 8192), (4096, 4096, 4096)]
    shapes += [(m, 4096, n) for n in (4096, 11008) for m in (1, 16, 128, 2048)]
    shapes += [(m, k, n) for m in (32, 64) for k, n in ((4096, 6144), (4096, 4096), (4096, 14336), (14336, 4096))]
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    dtypes = [(DType.bfloat16, torch.bfloat16, "bf16"), (DType.float16, torch.float16, "f16")]
    dtypes = [d for d in dtypes if d[2] in args.dtypes.split(",")]
    layouts = [l for l in ("b", "wt") if l in args.layouts.split(",")]
    rows = []
    for dtype, tdtype, _ in dtypes:
        for (m, k, n), layout in ((s, l) for s in shapes for l in layouts):
            wt = layout == "wt"
            bshape = (n, k) if wt else (k, n)
            with Graph("gemm", input_types=[TensorType(dtype, (m, k), DeviceRef.GPU()), TensorType(dtype, bshape, DeviceRef.GPU())]) as g:
                x, w = g.inputs
                g.output(ops.matmul(x, ops.transpose(w, 0, 1) if wt else w))
            ta = torch.randn(m, k, device="cuda", dtype=tdtype) / 8
            tb = torch.randn(*bshape, device="cuda", dtype=tdtype) / 8
            a, b = driver.Buffer.from_dlpack(ta), driver.Buffer.from_dlpack(tb)
            tbm = tb.t() if wt else tb
            ref = ta.float() @ tbm.float()
            flops = 2 * m * k * n
            for label, spec in variants:
                with tuning.override(spec):
                    model = session.load(g)
                    (out,) = model.execute(a, b)
                    err = (torch.from_dlpack(out).float() - ref).abs().max().item() / ref.abs().max().item()
                    # cuBLAS and ours alternate, `rounds` times each; the medians (and the
                    # median of the per-round ratios) absorb clock drift between the two.
                    times = [(cuda_time(torch, lambda: ta @ tbm, args.reps), cuda_time(torch, lambda: model.execute(a, b), args.reps))
                             for _ in range(max(args.rounds, 1))]
                    theirs = statistics.median(t for t, _ in times)
                    ours = statistics.median(o for _, o in times)
                    ratios = [t / o for t, o in times]
                row = {"dtype": dtype.name, "layout": layout, "m": m, "k": k, "n": n}
                if args.variants:
                    row["variant"] = label
                row.update({"max_tflops": round(flops / ours / 1e12, 1), "cublas_tflops": round(flops / theirs / 1e12, 1),
                            "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
                            "ratio_max": round(max(ratios), 3), "rel_err": float(f"{err:.2e}")})
                rows.append(row)
                print(rows[-1], flush=True)
    write("gpu_gemm_variants" if args.variants else "gpu_gemm", torch.cuda.get_device_name(), rows,
          " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
