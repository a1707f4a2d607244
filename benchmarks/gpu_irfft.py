"""irfft on the GPU against torch.fft.irfft (cuFFT) on the same spectra, in one process: float32
rows of smooth lengths (Stockham passes in shared memory), a prime half-length (Bluestein) and
rows too long for shared memory (global work areas). Also prints the largest difference from
torch's result, relative to its largest magnitude. JSON to benchmarks/results/.

    python benchmarks/gpu_irfft.py

Skips (printing why) on a machine without a GPU.
"""

import sys

from common import time_async, write
from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

# (rows, n)
SHAPES = [(4096, 1024), (1024, 4096), (256, 16384), (64, 2 * 8191), (1024, 1000), (16, 1 << 20)]


def main() -> None:
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])

    def sync():
        torch.cuda.synchronize()
        gpu.synchronize()

    rows = []
    for batch, n in SHAPES:
        m = n // 2 + 1
        x = torch.randn(batch, m, 2, device="cuda", dtype=torch.float32)
        xc = torch.view_as_complex(x)
        t = TensorType(DType.float32, (batch, m, 2), DeviceRef.GPU())
        model = session.load(Graph("irfft", lambda v: ops.irfft(v, n=n, input_is_complex=True), input_types=[t]))
        xb = driver.Buffer.from_dlpack(x)
        ours = time_async(lambda: model.execute(xb), sync, reps=20)
        theirs = time_async(lambda: torch.fft.irfft(xc, n=n), sync, reps=20)
        got = torch.from_dlpack(model.execute(xb)[0])
        want = torch.fft.irfft(xc, n=n)
        diff = float((got - want).abs().max() / want.abs().max())
        moved = batch * (m * 8 + n * 4)  # read the spectrum once, write the samples once
        rows.append({"shape": f"{batch}x{n}", "max_us": round(ours * 1e6, 1), "torch_us": round(theirs * 1e6, 1),
                     "max_GBps": round(moved / ours / 1e9, 1), "torch_over_max": round(theirs / ours, 3),
                     "rel_diff": f"{diff:.1e}"})
        print(rows[-1])
    write("gpu_irfft", torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
