"""Moves data onto the default device (the GPU when there is one, else the CPU), works on views
there, and brings the results back, printing what it did.

    python examples/hello_buffers.py
"""

import time

import numpy as np

from max import driver
from max.dtype import DType


def main() -> None:
    device = driver.Accelerator() if driver.accelerator_count() else driver.CPU()
    where = f"{device} ({device.architecture_name})" if not device.is_host else f"{device}"
    print(f"device: {where}")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 1024)).astype(np.float32)
    start = time.perf_counter()
    buf = driver.Buffer.from_numpy(x).to(device)
    corner = buf[:4, ::-256]          # a strided view, still on the device
    back = corner.to_numpy()          # copied to the host (shared memory on the CPU)
    elapsed = time.perf_counter() - start
    assert np.array_equal(back, x[:4, ::-256])
    print(f"moved {x.nbytes / 2**20:.0f} MiB to {device.label} and read a {corner.shape} view back "
          f"in {elapsed * 1e3:.2f} ms")

    bits = driver.Buffer.from_numpy(x[:2, :3]).view(DType.uint32).to(device)
    print("the float32 bits of x[:2, :3]:")
    print(bits.to_numpy())
    stats = device.stats
    print(f"{device.label} memory: {stats['free_memory'] / 2**30:.1f} GiB free of "
          f"{stats['total_memory'] / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
