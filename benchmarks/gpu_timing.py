"""GPU time of microsecond work with the host out of the way: calls are queued behind a spin
kernel (torch.cuda._sleep) on the stream they run on, between two CUDA events, so the GPU runs
them back to back as it would replay a CUDA graph and launch overhead is not measured. Needs
torch. Used by gpu_conv2d.py, gpu_qmatmul.py and gpu_gemv.py; also the device copy rate those
compare weight streaming with.
"""

from __future__ import annotations

import re
import statistics
import time

SPIN_HZ = 2.0e9  # clock64 ticks per second, about (spin length only)


class Timer:
    """GPU seconds per call of `fn`, queued `reps` times behind a spin kernel on `stream`."""

    def __init__(self, torch, target_s: float = 2e-3):
        self.torch = torch
        self.target_s = target_s
        self.spin_s = 5e-3

    def once(self, stream, fn, reps):
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            torch.cuda._sleep(int(self.spin_s * SPIN_HZ))
            start.record(stream)
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            host = time.perf_counter() - t0
            end.record(stream)
        end.synchronize()
        starved = host > 0.8 * self.spin_s  # the GPU may have waited for the host
        if starved:
            self.spin_s = min(0.5, 2 * host)
        return start.elapsed_time(end) / 1e3 / reps, starved

    def __call__(self, stream, fn):
        self.torch.cuda.synchronize()
        est, _ = self.once(stream, fn, 2)
        reps = max(3, min(100, int(self.target_s / max(est, 1e-7))))
        times = []
        for _ in range(3):
            t, starved = self.once(stream, fn, reps)
            if starved:
                t, _ = self.once(stream, fn, reps)
            times.append(t)
        return statistics.median(times)


def our_stream(gpu):
    """The model's stream as a torch stream (its handle is in the stream's repr)."""
    import torch

    handle = int(re.search(r"handle=(0x[0-9a-f]+)", repr(gpu.default_stream)).group(1), 16)
    return torch.cuda.ExternalStream(handle)


def copy_rate_gbps(gpu, sync) -> float:
    """The device's copy rate in GB/s (read + write bytes of a 1 GiB device-to-device copy over
    its time): the rate a GEMV streaming its weights is compared with."""
    from common import time_gpu
    from max import driver
    from max.dtype import DType

    nbytes = 1 << 30
    src = driver.Buffer(DType.uint8, [nbytes], device=gpu)
    return 2 * nbytes / time_gpu(lambda: src.copy(), sync) / 1e9
