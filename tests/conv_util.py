"""Shared by the conv op tests (tests/test_conv.py,
tests/test_conv_epilogue.py): the problems, random operands, the float64 references
(shift-and-accumulate over kernel taps, direct scatter for the transposed convolution, masked
window sums for pooling and fold) and the comparison within each dtype's rounding."""

import numpy as np

from helpers import VALUE_TYPES
from max.dtype import DType
from max.graph.type import ConvInputLayout

FLOATS = [DType.float32, DType.float64, DType.float16, DType.bfloat16]


INTS = [DType.int8, DType.int32, DType.int64, DType.uint8, DType.uint64]


RTOL = {DType.float32: 1e-6, DType.float64: 1e-12, DType.float16: 1e-2, DType.bfloat16: 1e-2}


NHWC, NCHW = ConvInputLayout.NHWC, ConvInputLayout.NCHW


def ids(d):
    return d.name if isinstance(d, DType) else str(d)


def random(rng, dtype, shape):
    """Normal floats; small integers (so that products stay exact), bools."""
    if dtype is DType.bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.is_integral():
        lo = 0 if dtype.name.startswith("uint") else -3
        return rng.integers(lo, 4, size=shape).astype(VALUE_TYPES[dtype])
    return rng.standard_normal(shape).astype(VALUE_TYPES[dtype])


def f64(a):
    return np.asarray(a).astype(np.float64)


def compare(out, ref, scale, dtype):
    """Floats: |out - ref| within RTOL of `scale` (the sum of the absolute terms); integers:
    exact after wrapping to the dtype; bool: nonzero."""
    if dtype is DType.bool:
        np.testing.assert_array_equal(out, ref != 0)
    elif dtype.is_integral():
        np.testing.assert_array_equal(out, ref.astype(np.int64).astype(VALUE_TYPES[dtype]))
    else:
        assert out.dtype == VALUE_TYPES[dtype]
        err = np.abs(f64(out) - ref)
        bound = RTOL[dtype] * (scale + np.abs(ref)) + (2.0**-24 if dtype is DType.float16 else 0)
        bad = ~(err <= bound)
        assert not bad.any(), f"{bad.sum()} of {bad.size} differ, e.g. got {f64(out)[bad][:4]} want {ref[bad][:4]}"


def conv_ref(x, w, stride, dil, pad, groups):
    """x: [N, *S, C], w: [*K, C/groups, F] -> [N, *O, F], summing shifted strided slices of the
    padded input times each tap's [C/groups, F/groups] matrix."""
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0)] + [(pad[2 * i], pad[2 * i + 1]) for i in range(nd)] + [(0, 0)])
    k, cg, f = w.shape[:nd], w.shape[nd], w.shape[-1]
    fg = f // groups
    o = [(xp.shape[1 + i] - dil[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    out = np.zeros((x.shape[0], *o, f))
    for tap in np.ndindex(*k):
        sl = tuple(slice(tap[i] * dil[i], tap[i] * dil[i] + stride[i] * (o[i] - 1) + 1, stride[i]) for i in range(nd))
        patch = xp[(slice(None), *sl)]
        for g in range(groups):
            out[..., g * fg : (g + 1) * fg] += patch[..., g * cg : (g + 1) * cg] @ w[tap][:, g * fg : (g + 1) * fg]
    return out


def conv_t_ref(x, w, stride, dil, pad, out_pad):
    """x: [N, H, W, Cin], w: [R, S, F, Cin] -> [N, OH, OW, F]: every input pixel scattered
    through every tap, then the padding cropped."""
    n, h, wd, _ = x.shape
    r, s, f, _ = w.shape
    full = np.zeros((n, (h - 1) * stride[0] + dil[0] * (r - 1) + 1 + out_pad[0], (wd - 1) * stride[1] + dil[1] * (s - 1) + 1 + out_pad[1], f))
    for i in range(r):
        for j in range(s):
            full[:, i * dil[0] : i * dil[0] + stride[0] * (h - 1) + 1 : stride[0], j * dil[1] : j * dil[1] + stride[1] * (wd - 1) + 1 : stride[1]] += x @ w[i, j].T
    oh, ow = full.shape[1] - pad[0] - pad[1], full.shape[2] - pad[2] - pad[3]
    return full[:, pad[0] : pad[0] + oh, pad[2] : pad[2] + ow]


FILTER_PERM = {  # canonical [*K, C, F] -> layout
    "RSCF": (0, 1, 2, 3), "FCRS": (3, 2, 0, 1), "CFRS": (2, 3, 0, 1),
    "QRSCF": (0, 1, 2, 3, 4), "FCQRS": (4, 3, 0, 1, 2),
}


T_FILTER_PERM = {"RSCF": (0, 1, 2, 3), "CFRS": (3, 2, 0, 1), "FCRS": (2, 3, 0, 1)}  # from [R, S, F, Cin]


def to_nchw(x):
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


CONV2D = [
    # x shape (NHWC), filter (R, S, C/groups, F), kwargs
    ((2, 9, 11, 3), (3, 3, 3, 5), {}),
    ((2, 13, 10, 4), (3, 3, 4, 6), dict(stride=2, padding=(1, 1, 1, 1))),
    ((1, 12, 9, 3), (3, 2, 3, 4), dict(dilation=2, padding=(2, 1, 0, 3))),
    ((2, 11, 10, 5), (2, 3, 5, 3), dict(stride=(2, 3), dilation=(1, 2), padding=(0, 2, 1, 0))),
    ((2, 8, 7, 4), (3, 3, 2, 6), dict(groups=2, padding=(1, 1, 1, 1))),
    ((2, 9, 8, 6), (3, 3, 1, 6), dict(groups=6, padding=(1, 1, 1, 1))),
    ((1, 10, 9, 4), (3, 3, 1, 8), dict(groups=4, stride=2, dilation=2, padding=(2, 2, 2, 2))),
    ((2, 5, 7, 8), (1, 1, 8, 16), {}),
    ((2, 6, 7, 8), (1, 1, 8, 4), dict(stride=2)),
    ((2, 5, 6, 8), (1, 1, 4, 6), dict(groups=2)),
    ((1, 23, 19, 3), (7, 7, 3, 8), dict(stride=2, padding=(3, 3, 3, 3))),
]


CONV3D = [
    ((2, 5, 6, 7, 3), (2, 3, 2, 3, 4), {}),
    ((1, 7, 6, 8, 2), (3, 2, 3, 2, 5), dict(stride=(1, 2, 1), dilation=(2, 1, 1), padding=(1, 0, 1, 1, 0, 1))),
    ((2, 4, 5, 5, 6), (2, 2, 2, 2, 6), dict(groups=3, stride=2, padding=(1, 1, 1, 1, 1, 1))),
    ((1, 5, 5, 5, 4), (3, 3, 3, 1, 4), dict(groups=4, padding=(1, 1, 1, 1, 1, 1))),
    ((2, 3, 4, 5, 8), (1, 1, 1, 8, 3), {}),
]


CONV_T = [
    # x (NHWC), filter [R, S, F, Cin], kwargs
    ((2, 5, 6, 3), (3, 3, 4, 3), {}),
    ((2, 5, 6, 3), (3, 3, 4, 3), dict(stride=2, padding=(1, 1, 1, 1), output_paddings=(1, 1))),
    ((1, 4, 7, 2), (2, 3, 5, 2), dict(stride=(2, 3), dilation=(2, 1), padding=(0, 2, 1, 0))),
    ((2, 6, 5, 4), (3, 2, 3, 4), dict(dilation=2, padding=(2, 1, 0, 1))),
    ((2, 5, 5, 8), (1, 1, 6, 8), dict(stride=2, output_paddings=(1, 0))),
    ((1, 3, 3, 2), (4, 4, 3, 2), dict(stride=3, padding=(1, 2, 2, 1), output_paddings=(2, 1))),
]


def pool_ref(x, k, stride, dil, pad, ceil, mode, count_boundary=True):
    """Max or average over each window of NHWC `x`; taps outside the input are left out, and
    the average divides by kh * kw (count_boundary) or by the taps inside."""
    n, h, w, c = x.shape
    o = []
    for i, size in enumerate((h, w)):
        room = size + 2 * pad[i] - dil[i] * (k[i] - 1) - 1
        o.append((room + (stride[i] - 1 if ceil else 0)) // stride[i] + 1)
    need = [(o[i] - 1) * stride[i] + (k[i] - 1) * dil[i] + 1 for i in range(2)]
    widths = [(0, 0)] + [(pad[i], max(pad[i], need[i] - (x.shape[1 + i] + pad[i]))) for i in range(2)] + [(0, 0)]
    xp = np.pad(x, widths)
    inside = np.pad(np.ones_like(x, dtype=bool), widths)
    acc = np.full((n, o[0], o[1], c), -np.inf if mode == "max" else 0.0)
    count = np.zeros_like(acc)
    for r in range(k[0]):
        for s in range(k[1]):
            sl = (slice(None), slice(r * dil[0], r * dil[0] + stride[0] * (o[0] - 1) + 1, stride[0]),
                  slice(s * dil[1], s * dil[1] + stride[1] * (o[1] - 1) + 1, stride[1]))
            v, m = xp[sl], inside[sl]
            if mode == "max":
                acc = np.maximum(acc, np.where(m, v, -np.inf))
            else:
                acc += np.where(m, v, 0)
                count += m
    if mode == "max":
        return acc
    return acc / (k[0] * k[1] if count_boundary else count)


POOLS = [
    ((2, 9, 10, 3), dict(kernel_size=(3, 3), stride=2, padding=1)),
    ((2, 7, 9, 4), dict(kernel_size=(2, 2), stride=2, ceil_mode=True)),
    ((1, 8, 9, 2), dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True)),
    ((2, 10, 11, 3), dict(kernel_size=(2, 3), dilation=2, padding=(1, 1))),
    ((1, 6, 6, 5), dict(kernel_size=(1, 1))),
    ((3, 12, 12, 8), dict(kernel_size=(7, 7), stride=2, padding=3)),
]


def fold_ref(x, size, k, stride, dil, pad):
    n, ckk, _ = x.shape
    c = ckk // (k[0] * k[1])
    grid = [(size[i] + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(2)]
    xr = x.reshape(n, c, k[0], k[1], grid[0], grid[1])
    canvas = np.zeros((n, c, size[0] + 2 * pad[0], size[1] + 2 * pad[1]))
    for i in range(k[0]):
        for j in range(k[1]):
            canvas[:, :, i * dil[0] : i * dil[0] + stride[0] * (grid[0] - 1) + 1 : stride[0], j * dil[1] : j * dil[1] + stride[1] * (grid[1] - 1) + 1 : stride[1]] += xr[:, :, i, j]
    return canvas[:, :, pad[0] : pad[0] + size[0], pad[1] : pad[1] + size[1]]


FOLDS = [
    (3, (4, 5), dict(kernel_size=(2, 2))),
    (2, (5, 6), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    (4, (7, 7), dict(kernel_size=(3, 3), stride=2, padding=1)),
    (1, (6, 5), dict(kernel_size=(1, 2), stride=(3, 1))),
]
