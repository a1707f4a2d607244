"""Fused elementwise kernels against the device copy rate (torch's clone of the same bytes) and
against torch eager doing the same math, in one process. JSON to benchmarks/results/.
Our side is also timed with one and with two 16-byte vectors per thread step forced
(max.tuning.override("fusion.vec2=0") / "fusion.vec2=1"; the default picks two for 16-bit
data), as `ms_vec1` / `ms_vec2`.

    python benchmarks/gpu_elementwise.py
"""

import sys

from common import cuda_time, write
from max import driver, engine, tuning
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops


def main() -> None:
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    n = 1 << 26
    rows = []
    for dtype, tdtype in [(DType.float32, torch.float32), (DType.bfloat16, torch.bfloat16), (DType.float16, torch.float16)]:
        t = TensorType(dtype, (n,), DeviceRef.GPU())
        cases = {
            "a*b+c": (lambda a, b, c: a * b + c, lambda a, b, c: a * b + c, 4),
            "gelu(a)+b": (lambda a, b, c: ops.gelu(a) + b, lambda a, b, c: torch.nn.functional.gelu(a) + b, 3),
            "relu(a)": (lambda a, b, c: ops.relu(a), lambda a, b, c: torch.relu(a), 2),
        }
        xs = [torch.randn(n, device="cuda", dtype=tdtype) for _ in range(3)]
        bufs = [driver.Buffer.from_dlpack(x) for x in xs]
        copy_s = cuda_time(torch, lambda: xs[0].clone())
        copy_rate = 2 * n * xs[0].element_size() / copy_s
        for name, (graph_fn, torch_fn, touches) in cases.items():
            g = Graph("ew", graph_fn, input_types=[t, t, t])
            model = session.load(g)
            ours = cuda_time(torch, lambda: model.execute(*bufs))
            forced = {}
            for v in ("0", "1"):
                with tuning.override(f"fusion.vec2={v}"):
                    forced[v] = cuda_time(torch, lambda: model.execute(*bufs))
            theirs = cuda_time(torch, lambda: torch_fn(*xs))
            moved = touches * n * xs[0].element_size()
            rows.append({"op": name, "dtype": dtype.name, "max_GBps": round(moved / ours / 1e9, 1),
                         "copy_GBps": round(copy_rate / 1e9, 1), "fraction_of_copy": round(moved / ours / copy_rate, 3),
                         "torch_ms": round(theirs * 1e3, 3), "max_ms": round(ours * 1e3, 3),
                         "ms_vec1": round(forced["0"] * 1e3, 3), "ms_vec2": round(forced["1"] * 1e3, 3)})
            print(rows[-1])
    write("gpu_elementwise", torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
