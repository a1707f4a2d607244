"""Host<->GPU and GPU<->GPU copy bandwidth of max.driver.Buffer against torch, side by side in
one process, plus the cast kernel against torch's .to(dtype). Needs a GPU and torch.

    python benchmarks/transfer.py
"""

import sys

import numpy as np

from common import time_gpu, write
from max import driver
from max.dtype import DType


def main() -> None:
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()
    name = torch.cuda.get_device_name()
    sync = torch.cuda.synchronize
    n = 256 << 20  # bytes
    a = np.random.default_rng(0).standard_normal(n // 4).astype(np.float32)
    rows = []

    def row(what, ours_s, torch_s, nbytes):
        rows.append({
            "op": what,
            "max_GBps": round(nbytes / ours_s / 1e9, 1),
            "torch_GBps": round(nbytes / torch_s / 1e9, 1),
            "ratio": round(torch_s / ours_s, 3),
        })

    host = driver.Buffer.from_numpy(a)
    th = torch.from_numpy(a)
    row("h2d pageable", time_gpu(lambda: host.to(gpu), sync), time_gpu(lambda: th.to("cuda"), sync), n)
    pinned = driver.Buffer(DType.float32, [a.size], device=gpu, pinned=True)
    pinned.inplace_copy_from(host)
    tp = th.pin_memory()
    row("h2d pinned", time_gpu(lambda: pinned.to(gpu), sync), time_gpu(lambda: tp.to("cuda"), sync), n)
    dev = host.to(gpu)
    td = th.to("cuda")
    row("d2h pageable", time_gpu(lambda: dev.to(driver.CPU()), sync), time_gpu(lambda: td.cpu(), sync), n)
    row("d2d copy", time_gpu(lambda: dev.copy(), sync), time_gpu(lambda: td.clone(), sync), 2 * n)
    row("cast f32->bf16", time_gpu(lambda: dev._cast(DType.bfloat16), sync),
        time_gpu(lambda: td.to(torch.bfloat16), sync), n + n // 2)
    dev16, td16 = dev._cast(DType.bfloat16), td.to(torch.bfloat16)
    row("cast bf16->f32", time_gpu(lambda: dev16._cast(DType.float32), sync),
        time_gpu(lambda: td16.float(), sync), n // 2 + n)
    write("transfer", name, rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
