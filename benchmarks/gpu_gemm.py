"""GEMM on the GPU through max.engine against torch.matmul (cuBLAS) in the same process, timed
with CUDA events after warm-up (median). bf16 and f16: 8192^3, 4096^3, and M in {1, 16, 128,
2048} x 4096x4096 and x11008. JSON to benchmarks/results/.

    python benchmarks/gpu_gemm.py
"""

import sys

import numpy as np

from common import time_async, write
from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops


def cuda_time(torch, fn, reps=20):
    """Seconds per call, with torch's and our streams both drained (see common.time_async)."""
    gpu = driver.Accelerator()

    def sync():
        torch.cuda.synchronize()
        gpu.synchronize()

    return time_async(fn, sync, reps=reps)


def main() -> None:
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    shapes = [(8192, 8192, 8192), (4096, 4096, 4096)]
    shapes += [(m, 4096, n) for n in (4096, 11008) for m in (1, 16, 128, 2048)]
    rows = []
    for dtype, tdtype in [(DType.bfloat16, torch.bfloat16), (DType.float16, torch.float16)]:
        for m, k, n in shapes:
            with Graph("gemm", input_types=[TensorType(dtype, (m, k), DeviceRef.GPU()), TensorType(dtype, (k, n), DeviceRef.GPU())]) as g:
                g.output(ops.matmul(*g.inputs))
            model = session.load(g)
            ta = torch.randn(m, k, device="cuda", dtype=tdtype) / 8
            tb = torch.randn(k, n, device="cuda", dtype=tdtype) / 8
            a, b = driver.Buffer.from_dlpack(ta), driver.Buffer.from_dlpack(tb)
            (out,) = model.execute(a, b)
            ref = ta.float() @ tb.float()
            err = (torch.from_dlpack(out).float() - ref).abs().max().item() / ref.abs().max().item()
            ours = cuda_time(torch, lambda: model.execute(a, b))
            theirs = cuda_time(torch, lambda: ta @ tb)
            flops = 2 * m * k * n
            rows.append({"dtype": dtype.name, "m": m, "k": k, "n": n, "max_tflops": round(flops / ours / 1e12, 1),
                         "cublas_tflops": round(flops / theirs / 1e12, 1), "ratio": round(theirs / ours, 3),
                         "rel_err": float(f"{err:.2e}")})
            print(rows[-1])
    write("gpu_gemm", torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
