"""qmatmul on the GPU. Decode (M = 1 to 4 lhs rows): Q4_0, Q8_0 and Q4_K weights of [N, K] =
[4096, 4096], [11008, 4096] and [32000, 4096] (a vocabulary projection) at M = 1, and the
Llama-3-8B shapes (q/o 4096 x 4096, k/v 1024 x 4096, gate/up 14336 x 4096, down 4096 x 14336,
and its Q6_K vocabulary projection 128256 x 4096) at M = 1..4 for Q4_0 and at M = 1 for the other
encodings: the time per call, the effective weight-read bandwidth (quantized weight bytes /
time), and that bandwidth as a fraction of the device's copy rate measured in the same run (a
1 GiB device-to-device copy, read + write bytes / time; `of_copy_rate`). Prefill (M = 512, the
8B shapes in Q4_0): the bf16 wgmma path (qmatmul_sm90.rs) against the f32 SIMT GEMM
(`gpu_us_simt`, qmatmul.wgmma=0), in TFLOP/s. `--rows 16,64` (decode batches, `--encodings`
Q4_0 by default): the 8B shapes at those M only; where qgemm_sm90.cu takes them (9-64 rows) also
`gpu_us_dequant`, the bf16 dequantize + GEMM path it replaced (qmatmul.qgemm=0).

Two times per shape: `wall_us`, calls back to back from Python (the engine's per-call host
overhead included), and `gpu_us`, the GPU time per call with the host out of the way
(gpu_timing.py), as a decode step replayed from a CUDA graph sees it. The bandwidth figures use
`gpu_us`. Successive timed calls read different copies of the weights, more of them than the
L2 cache holds, so every call reads its weights from memory. `gpu_us_<variant>` (with
`rel_err_<variant>`) times each kernel on the same weights, whichever the default picks: `mma`
the integer tensor-core qgemv_mma.cu (qgemv.mma=1; 4-bit encodings; for one row of short Q8_0
rows qgemv_mma_tile.cu), `stream` qgemv_stream.cu's CUDA-core kernel
(qgemv.mma=0,qgemv.stream=1), `general` qgemv.cu's
(qgemv.mma=0,qgemv.stream=0), and `no_pdl` the default kernel launched without programmatic
stream serialization (qgemv.pdl=0), so that back-to-back calls do not overlap. Each variant is
a tuning spec applied with max.tuning.override.
For scale, torch's bf16 GEMV over the same (dequantized) weights is timed as well. Each result
is checked against ops.dequantize followed by a float32 product in torch.

The weights are random blocks with finite f16 scales, made in memory (no files). Needs a GPU,
numpy and torch.

    python benchmarks/gpu_qmatmul.py
    python benchmarks/gpu_qmatmul.py --shapes 576x1536,2048x2048 --encodings Q4_0,Q4_1   # M = 1 only
    python benchmarks/gpu_qmatmul.py --rows 16,32,64 --encodings Q4_0,Q4_1
"""

from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np

from common import check_tuning, time_async, write
from gpu_timing import Timer, copy_rate_gbps, our_stream
from max import driver, engine, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.quantization import QuantizationEncoding as Q

ENCODINGS = [Q.Q4_0, Q.Q8_0, Q.Q4_K]
SHAPES = [(4096, 4096), (11008, 4096), (32000, 4096)]  # (N, K): weight rows, elements per row
LLAMA8B = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
VOCAB8B = (128256, 4096)  # the output projection, Q6_K in the common GGUF files
# (encoding, M, N, K) of every timed case: the original M = 1 table, then the 8B shapes.
CASES = (
    [(enc, 1, n, k) for enc in ENCODINGS for n, k in SHAPES]
    + [(Q.Q4_0, m, n, k) for m in (1, 2, 3, 4) for n, k in LLAMA8B]
    + [(enc, 1, n, k) for enc in (Q.Q4_1, Q.Q8_0, Q.Q4_K, Q.Q6_K) for n, k in LLAMA8B]
    + [(Q.Q6_K, m, *VOCAB8B) for m in (1, 2, 3, 4)]
    + [(Q.Q4_0, 512, n, k) for n, k in LLAMA8B]
)
ROTATE_BYTES = 320 << 20  # weight copies cycled through by the timed calls: beyond any L2
# Byte offsets of the f16 scale fields in each block (kept finite in random blocks).
F16_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q8_0: [0], Q.Q4_K: [0, 2], Q.Q6_K: [208]}
VARIANTS = {  # each GEMV kernel, as tuning specs (docs/configuration.md)
    "mma": "qgemv.mma=1",
    "stream": "qgemv.mma=0,qgemv.stream=1",
    "general": "qgemv.mma=0,qgemv.stream=0",
    "no_pdl": "qgemv.pdl=0",
    "mma_2_stages": "qgemv.mma=1,qgemv.stages=2",
    "mma_4_stages": "qgemv.mma=1,qgemv.stages=4",
    "mma_1_stage": "qgemv.mma=1,qgemv.stages=1",  # (the Q8_0 tile kernel only)
}


def random_blocks(rng: np.random.Generator, enc: Q, rows: int, k: int) -> np.ndarray:
    blocks = k // enc.elements_per_block
    raw = rng.integers(0, 256, size=(rows, blocks, enc.block_size), dtype=np.uint8)
    for off in F16_FIELDS[enc]:
        scale = (rng.standard_normal((rows, blocks)) * 0.02).astype(np.float16)
        raw[:, :, off : off + 2] = scale.view(np.uint8).reshape(rows, blocks, 2)
    return raw.reshape(rows, blocks * enc.block_size)


def parse_cases() -> tuple[str, list[tuple[Q, int, int, int]]]:
    """The result name and CASES, or gpu_qmatmul_shapes and the M = 1 cases of `--shapes` x
    `--encodings`."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="", help="NxK,... at M = 1 instead of the built-in cases")
    ap.add_argument("--encodings", default="Q4_0", help="with --shapes: comma-separated (default Q4_0)")
    ap.add_argument("--rows", default="", help="M,... : the 8B shapes at these many-row counts only")
    args = ap.parse_args()
    if args.rows:
        ms = [int(v) for v in args.rows.split(",") if v]
        encs = [Q(e) for e in args.encodings.split(",")]
        # (Q6_K: also the output projection, Q6_K in the common GGUF files)
        shapes = {enc: LLAMA8B + ([VOCAB8B] if enc == Q.Q6_K else []) for enc in encs}
        return "gpu_qmatmul_rows", [(enc, m, n, k) for enc in encs for m in ms for n, k in shapes[enc]]
    if not args.shapes:
        return "gpu_qmatmul", CASES
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    return "gpu_qmatmul_shapes", [(Q(e), 1, n, k) for e in args.encodings.split(",") for n, k in shapes]


def main() -> None:
    result_name, cases = parse_cases()
    check_tuning(VARIANTS.values())
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
    rng = np.random.default_rng(0)

    copy_gbps = copy_rate_gbps(gpu, sync)

    rows = []
    for enc, m, n, k in cases:
        kb = k // enc.elements_per_block * enc.block_size
        gref = DeviceRef.GPU()
        with Graph("qmm", input_types=[TensorType(DType.float32, (m, k), gref), TensorType(DType.uint8, (n, kb), gref)]) as g:
            g.output(ops.qmatmul(enc, None, *g.inputs))
        model = session.load(g)
        with Graph("deq", input_types=[TensorType(DType.uint8, (n, kb), gref)]) as g:
            g.output(ops.dequantize(enc, g.inputs[0]))
        deq = session.load(g)
        x = driver.Buffer.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).to(gpu)
        w = driver.Buffer.from_numpy(random_blocks(rng, enc, n, k)).to(gpu)
        (out,) = model.execute(x, w)
        (wd,) = deq.execute(w)
        tw = torch.from_dlpack(wd)
        tx = torch.from_dlpack(x)
        ref = tx @ tw.T
        err = (torch.from_dlpack(out) - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
        wall = time_async(lambda: model.execute(x, w), sync, warmup=10, reps=200)
        weight_bytes = n * kb
        ws = itertools.cycle([w] + [w.copy() for _ in range(ROTATE_BYTES // weight_bytes)])
        ours = timer(stream, lambda: model.execute(x, next(ws)))
        # The other kernels on the same weights (decode: the GEMV variants at M = 1;
        # prefill: the f32 SIMT GEMM).
        variants = {}
        specs = VARIANTS if m == 1 else {"simt": "qmatmul.wgmma=0"} if m > 8 else {}
        if 8 < m <= 64:  # the dequantize + GEMM path that qgemm_sm90.cu replaced there
            specs = {**specs, "dequant": "qmatmul.qgemm=0"}
        for name, spec in specs.items():
            with tuning.override(spec):
                (vout,) = model.execute(x, w)
                verr = (torch.from_dlpack(vout) - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
                variants[f"gpu_us_{name}"] = round(timer(stream, lambda: model.execute(x, next(ws))) * 1e6, 1)
                variants[f"rel_err_{name}"] = float(f"{verr:.2e}")
        tx16 = tx.to(torch.bfloat16)
        tw16 = tw.to(torch.bfloat16)
        tws = itertools.cycle([tw16] + [tw16.clone() for _ in range(ROTATE_BYTES // (n * k * 2))])
        theirs = timer(side, lambda: tx16 @ next(tws).T)
        gbps = weight_bytes / ours / 1e9
        if m > 8:
            variants["tflops"] = round(2 * m * n * k / ours / 1e12, 1)
            variants["tflops_simt"] = round(2 * m * n * k / variants["gpu_us_simt"] / 1e6, 2)
            if "gpu_us_dequant" in variants:
                variants["speedup_vs_dequant"] = round(variants["gpu_us_dequant"] / (ours * 1e6), 2)
        rows.append({
            "encoding": enc.value, "m": m, "n": n, "k": k, "weight_MB": round(weight_bytes / 1e6, 2),
            "wall_us": round(wall * 1e6, 1), "gpu_us": round(ours * 1e6, 1),
            **variants, "weight_GBps": round(gbps, 1),
            "of_copy_rate": round(gbps / copy_gbps, 3), "device_copy_GBps": round(copy_gbps, 1),
            "torch_bf16_gemv_gpu_us": round(theirs * 1e6, 1),
            "torch_bf16_GBps": round(n * k * 2 / theirs / 1e9, 1), "rel_err": float(f"{err:.2e}"),
        })
        print(rows[-1])
    write(result_name, torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
