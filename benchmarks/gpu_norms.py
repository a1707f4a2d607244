"""softmax and layer_norm over the last dim on the GPU against torch.softmax and
torch.nn.functional.layer_norm on the same tensors, in one process. JSON to benchmarks/results/.

    python benchmarks/gpu_norms.py

Skips (printing why) on a machine without a GPU.
"""

import sys

from common import cuda_time, write
from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

SHAPES = [(4096, 1024), (32 * 128, 768), (8, 16384)]
EPS = 1e-5


def main() -> None:
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    rows = []
    for dtype, tdtype in [(DType.bfloat16, torch.bfloat16), (DType.float32, torch.float32)]:
        for m, d in SHAPES:
            x = torch.randn(m, d, device="cuda", dtype=tdtype)
            w = torch.randn(d, device="cuda", dtype=tdtype)
            b = torch.randn(d, device="cuda", dtype=tdtype)
            xb, wb, bb = (driver.Buffer.from_dlpack(t) for t in (x, w, b))
            tx, tp = TensorType(dtype, (m, d), DeviceRef.GPU()), TensorType(dtype, (d,), DeviceRef.GPU())
            cases = {
                "softmax": (
                    session.load(Graph("softmax", lambda x: ops.softmax(x, -1), input_types=[tx])),
                    (xb,),
                    lambda: torch.softmax(x, dim=-1),
                ),
                "layer_norm": (
                    session.load(Graph("ln", lambda x, g, b: ops.layer_norm(x, g, b, EPS), input_types=[tx, tp, tp])),
                    (xb, wb, bb),
                    lambda: torch.nn.functional.layer_norm(x, (d,), w, b, EPS),
                ),
            }
            for name, (model, args, torch_fn) in cases.items():
                ours = cuda_time(torch, lambda: model.execute(*args), 50)
                theirs = cuda_time(torch, torch_fn, 50)
                moved = 2 * m * d * x.element_size()  # read x once, write y once
                rows.append({"op": name, "dtype": dtype.name, "shape": f"{m}x{d}",
                             "max_us": round(ours * 1e6, 1), "torch_us": round(theirs * 1e6, 1),
                             "max_GBps": round(moved / ours / 1e9, 1), "torch_GBps": round(moved / theirs / 1e9, 1),
                             "torch_over_max": round(theirs / ours, 3)})
                print(rows[-1])
    write("gpu_norms", torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
