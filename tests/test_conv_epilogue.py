"""Conv2d epilogue fusion (crates/runtime/src/engine/conv_epilogue.rs): conv2d followed by a
bias add, an activation, a clamp (ops.max/ops.min with scalars) and a residual add optionally
scaled by a scalar constant — D = lambda(conv(A, B)) + beta * C — becomes one step when the
ops are GPU-placed and the intermediates have no other readers.

The pass's structure is checked on any machine through `_lowered_steps` (the compiled step
names, whatever devices the graph names); the results on the GPU (tests marked gpu) against a
numpy float64 reference and against the same graph compiled with fusion.epilogue=0, for
every activation, with and without the bias and the residual, beta 1 and 0.5, in bf16, f16
and f32, on the GEMM path (which applies the epilogue itself) and on the paths that run the
convolution and then the epilogue (grouped, depthwise, F not a multiple of 8)."""

import math

import ml_dtypes
import numpy as np
import pytest

from engine_util import run, session
from max import _core, driver
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.graph.type import ConvInputLayout
from max import tuning
from conv_util import conv_ref

GPU, CPU = DeviceRef.GPU(), DeviceRef.CPU()
TOL = {DType.float32: 2e-4, DType.float16: 1e-2, DType.bfloat16: 4e-2}
DTYPES = [DType.bfloat16, DType.float16, DType.float32]


def erf(v):
    return np.vectorize(math.erf)(v)


def sig(v):
    return 1 / (1 + np.exp(-v))


# name: (staged, float64 reference, the name in the fused step)
ACTS = {
    "none": (lambda v: v, lambda v: v, None),
    "relu": (ops.relu, lambda v: np.maximum(v, 0), "relu"),
    "gelu": (ops.gelu, lambda v: 0.5 * v * (1 + erf(v / math.sqrt(2))), "gelu"),
    "gelu_tanh": (lambda v: ops.gelu(v, approximate="tanh"),
                  lambda v: 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v**3))), "gelu"),
    "gelu_quick": (lambda v: ops.gelu(v, approximate="quick"), lambda v: v * sig(1.702 * v), "gelu"),
    "silu": (ops.silu, lambda v: v * sig(v), "silu"),
    "sigmoid": (ops.sigmoid, sig, "sigmoid"),
    "clamp": (lambda v: ops.min(ops.max(v, -0.5), 0.75), lambda v: np.clip(v, -0.5, 0.75), "clamp"),
    "relu6": (lambda v: ops.min(ops.relu(v), 6.0), lambda v: np.clip(v, 0, 6), "relu+clamp"),
}


def as_np(d):
    return ml_dtypes.bfloat16 if d is DType.bfloat16 else d.to_numpy()


def rand(rng, dtype, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(as_np(dtype))


def lowered(fn, types):
    """The compiled step names of `fn` over inputs of `types`, constants left out."""
    g = Graph("t", fn, input_types=types)
    return [s for s in _core.engine._lowered_steps(g._ir) if s != "constant"]


def tt(dtype, shape, device=GPU):
    return TensorType(dtype, shape, device)


# ---- structure (any machine) -----------------------------------------------------------------


def block(act="relu", bias=True, residual=True, beta=None, beta_first=False, conv_bias=False):
    """conv2d(x, w) [+ b] -> act -> [+ r (* beta)] over inputs x, w, b, r[, conv bias]."""

    def fn(x, w, b, r, *rest):
        y = ops.conv2d(x, w, padding=(1, 1, 1, 1), bias=rest[0] if conv_bias else None)
        if bias:
            y = y + b
        y = ACTS[act][0](y)
        if residual:
            scaled = r if beta is None else (beta * r if beta_first else r * beta)
            y = y + scaled
        return y

    return fn


def block_types(dtype=DType.bfloat16, device=GPU, f=16, conv_bias=False):
    types = [tt(dtype, (2, 6, 5, 8), device), tt(dtype, (3, 3, 8, f), device), tt(dtype, (f,), device),
             tt(dtype, (2, 6, 5, f), device)]
    return types + ([tt(dtype, (f,), device)] if conv_bias else [])


@pytest.mark.parametrize("act", list(ACTS))
def test_every_activation_fuses_with_bias_and_residual(act):
    name = ACTS[act][2]
    want = "conv[conv2d+bias" + (f"+{name}" if name else "") + "+residual]"
    assert lowered(block(act), block_types()) == [want]


@pytest.mark.parametrize("beta_first", [False, True], ids=["r*beta", "beta*r"])
def test_a_scalar_constant_beta_joins_the_step(beta_first):
    steps = lowered(block("silu", beta=0.5, beta_first=beta_first), block_types())
    assert steps == ["conv[conv2d+bias+silu+residual*0.5]"]
    # an explicit rank-1 constant of one element is a scalar too
    def fn(x, w, b, r):
        beta = ops.constant(np.array([0.25], np.float32), DType.float32, GPU)
        return ops.conv2d(x, w, padding=(1, 1, 1, 1)) + ops.mul(beta, r)

    assert lowered(fn, block_types(DType.float32)) == ["conv[conv2d+residual*0.25]"]


def test_partial_chains_fuse():
    t = block_types()
    assert lowered(block("none", residual=False), t) == ["conv[conv2d+bias]"]
    assert lowered(block("gelu", bias=False, residual=False), t) == ["conv[conv2d+gelu]"]
    assert lowered(block("none", bias=False), t) == ["conv[conv2d+residual]"]
    assert lowered(block("clamp", bias=False, beta=2.0), t) == ["conv[conv2d+clamp+residual*2]"]
    # the conv's own bias stays its input; the added one is the epilogue's
    assert lowered(block("relu", conv_bias=True), block_types(conv_bias=True)) == ["conv[conv2d+bias+relu+residual]"]


def test_clamp_forms():
    t = block_types()
    forms = [
        lambda v: ops.max(ops.min(v, 1.0), -1.0),
        lambda v: ops.min(-1.0 * 0 + 1.0, ops.max(-1.0, v)),  # scalars first
        lambda v: ops.max(v, 0.0),
        lambda v: ops.min(v, 6.0),
    ]
    for clamp in forms:
        fn = lambda x, w, b, r, c=clamp: c(ops.conv2d(x, w, padding=(1, 1, 1, 1)) + b) + r  # noqa: E731
        assert lowered(fn, t) == ["conv[conv2d+bias+clamp+residual]"]


def test_what_does_not_fuse():
    t = block_types()

    def read_twice(x, w, b, r):
        y = ops.conv2d(x, w, padding=(1, 1, 1, 1))
        return ops.relu(y) * y

    assert lowered(read_twice, t) == ["conv2d", "fused[relu+mul]"]

    def biased_twice(x, w, b, r):
        y = ops.conv2d(x, w, padding=(1, 1, 1, 1)) + b
        return ops.relu(y), y

    assert lowered(biased_twice, t) == ["conv[conv2d+bias]", "relu"]

    def tensor_beta(x, w, b, r):
        # a per-channel scale is no beta: r * b is a plain residual, its mul stays
        return ops.conv2d(x, w, padding=(1, 1, 1, 1)) + r * b

    assert lowered(tensor_beta, t) == ["mul", "conv[conv2d+residual]"]

    def input_beta(x, w, b, r, s):
        # a scalar that is not a constant is no beta either
        return ops.conv2d(x, w, padding=(1, 1, 1, 1)) + r * s

    assert lowered(input_beta, t + [tt(DType.bfloat16, ())]) == ["mul", "conv[conv2d+residual]"]

    def wrong_bias(x, w, b, r, b2):
        # [6, 1, 16] varies along H: not a bias; and the chain ends at it
        return ops.relu(ops.conv2d(x, w, padding=(1, 1, 1, 1)) + b2)

    assert lowered(wrong_bias, t + [tt(DType.bfloat16, (6, 1, 16))]) == ["conv2d", "fused[add+relu]"]

    def broadcast_residual(x, w, b, r, r2):
        # a residual that broadcasts the result to a larger shape is none
        return ops.conv2d(x, w, padding=(1, 1, 1, 1)) + r2

    assert lowered(broadcast_residual, t + [tt(DType.bfloat16, (3, 2, 6, 5, 16))]) == ["conv2d", "add"]

    def clamp_by_tensor(x, w, b, r):
        return ops.max(ops.conv2d(x, w, padding=(1, 1, 1, 1)), b)

    assert lowered(clamp_by_tensor, t) == ["conv2d", "max"]


def test_host_placement_and_f64_do_not_fuse():
    assert lowered(block("relu", beta=0.5), block_types(device=CPU)) == ["conv2d", "fused[add+relu+mul+add]"]
    assert lowered(block("relu"), block_types(DType.float64)) == ["conv2d", "fused[add+relu+add]"]


def test_the_switch_turns_fusion_off():
    assert lowered(block("relu"), block_types()) == ["conv[conv2d+bias+relu+residual]"]
    with tuning.override(**{"fusion.epilogue": False}):
        assert lowered(block("relu"), block_types()) == ["conv2d", "fused[add+relu+add]"]


def test_host_graph_matches_numpy(rng):
    # the staged chain itself (run unfused on the host) against the float64 reference
    dtype = DType.float32
    x, w = rand(rng, dtype, (2, 6, 5, 8)), rand(rng, dtype, (3, 3, 8, 16), 1 / 8)
    b, r = rand(rng, dtype, (16,)), rand(rng, dtype, (2, 6, 5, 16))
    for act in ACTS:
        (got,) = run(Graph("h", block(act, beta=0.5), input_types=block_types(dtype, CPU)), x, w, b, r)
        ref = reference(act, x, w, b, r, 0.5, padding=(1, 1, 1, 1))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=act)


def reference(act, x, w, b, r, beta, padding=(0, 0, 0, 0), stride=(1, 1), groups=1, conv_bias=None):
    y = conv_ref(x.astype(np.float64), w.astype(np.float64), stride, (1, 1), padding, groups)
    if conv_bias is not None:
        y = y + conv_bias.astype(np.float64)
    if b is not None:
        y = y + b.astype(np.float64)
    y = ACTS[act][1](y)
    if r is not None:
        y = y + beta * r.astype(np.float64)
    return y


# ---- the GPU ---------------------------------------------------------------------------------


def check(rng, gpu, dtype, act, bias, residual, beta, xshape=(2, 11, 13, 24), kernel=(3, 3), f=40,
          stride=(1, 1), padding=(1, 1, 1, 1), groups=1, conv_bias=False, layout=ConvInputLayout.NHWC,
          fused_name=True):
    n, h, wd, c = xshape
    oh = (h + padding[0] + padding[1] - kernel[0]) // stride[0] + 1
    ow = (wd + padding[2] + padding[3] - kernel[1]) // stride[1] + 1
    oshape = (n, oh, ow, f)
    cg = c // groups
    x = rand(rng, dtype, xshape)
    w = rand(rng, dtype, (*kernel, cg, f), 1 / math.sqrt(kernel[0] * kernel[1] * cg))
    b, r = rand(rng, dtype, (f,)), rand(rng, dtype, oshape)
    cb = rand(rng, dtype, (f,)) if conv_bias else None
    beta_v = None if beta == 1 else beta

    def fn(x, w, b, r, *rest):
        xin = ops.permute(x, [0, 3, 1, 2]) if layout == ConvInputLayout.NCHW else x
        y = ops.conv2d(xin, w, stride=stride, padding=padding, groups=groups,
                       bias=rest[0] if conv_bias else None, input_layout=layout)
        if bias:
            y = y + b
        y = ACTS[act][0](y)
        if residual:
            y = y + (r if beta_v is None else r * beta_v)
        return y

    types = [tt(dtype, a.shape) for a in (x, w, b, r)] + ([tt(dtype, (f,))] if conv_bias else [])
    inputs = [x, w, b, r] + ([cb] if conv_bias else [])
    graph = Graph("conv_epi", fn, input_types=types)
    model = session(gpu).load(graph)
    args = [driver.Buffer.from_numpy(np.ascontiguousarray(a)).to(gpu) for a in inputs]
    report = model._plan_report(*args)
    name = ACTS[act][2]
    if fused_name and (bias or name or residual):
        assert "conv[conv2d" in report, report
    (got,) = [o.to_numpy() for o in model.execute(*args)]
    ref = reference(act, x, w, b if bias else None, r if residual else None, beta, padding, stride, groups, cb)
    tol = TOL[dtype]
    assert got.shape == oshape
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)
    unfused = unfused_run(graph, inputs, gpu)
    np.testing.assert_allclose(got.astype(np.float64), unfused.astype(np.float64), rtol=2 * tol, atol=2 * tol)
    return got, unfused


def unfused_run(graph, inputs, gpu):
    with tuning.override(**{"fusion.epilogue": False}):
        (out,) = run(graph, *inputs, device=gpu)
    return out


COMBOS = [(b, r, beta) for b in (True, False) for r in (True, False) for beta in ((1, 0.5) if r else (1,))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("bias,residual,beta", COMBOS, ids=lambda v: str(v))
def test_gpu_every_epilogue(rng, gpu, dtype, act, bias, residual, beta):
    check(rng, gpu, dtype, act, bias, residual, beta)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", [
    dict(xshape=(1, 7, 9, 16), kernel=(1, 1), f=24, padding=(0, 0, 0, 0)),  # 1x1: the GEMM reads x itself
    dict(xshape=(3, 10, 9, 13), kernel=(3, 2), f=8, stride=(2, 1), padding=(1, 0, 2, 1)),  # odd C, stride
    dict(xshape=(2, 9, 9, 8), f=20),  # F % 8 != 0: conv, then the epilogue group
    dict(xshape=(2, 9, 9, 16), f=32, groups=2),  # grouped: conv, then the epilogue group
    dict(xshape=(2, 9, 9, 16), f=16, groups=16),  # depthwise: the direct kernel, then the group
    dict(xshape=(1, 5, 6, 24), f=16, conv_bias=True),  # the conv's own bias and the epilogue's
    dict(xshape=(2, 8, 7, 16), f=24, layout=ConvInputLayout.NCHW),
], ids=["1x1", "odd_stride", "f20", "groups2", "depthwise", "conv_bias", "nchw"])
def test_gpu_shapes_and_paths(rng, gpu, dtype, case):
    check(rng, gpu, dtype, "gelu_tanh", True, True, 0.5, **case)
    check(rng, gpu, dtype, "relu6", True, True, 1, **case)


@pytest.mark.gpu
def test_gpu_chunked_rows_offset_the_residual(rng, gpu):
    # 3x3 over 256 channels: 2304-wide im2col rows, so 62500 rows take two scratch chunks and
    # the GEMM's residual has to start at each chunk's first row.
    check(rng, gpu, DType.bfloat16, "relu", True, True, 0.5, xshape=(1, 250, 250, 256), f=16)


@pytest.mark.gpu
def test_gpu_symbolic_batch(rng, gpu):
    dtype = DType.bfloat16
    types = [tt(dtype, ("n", 6, 5, 8)), tt(dtype, (3, 3, 8, 16)), tt(dtype, (16,)), tt(dtype, ("n", 6, 5, 16))]
    model = session(gpu).load(Graph("sym", block("silu", beta=0.5), input_types=types))
    w, b = rand(rng, dtype, (3, 3, 8, 16), 1 / 8), rand(rng, dtype, (16,))
    for n in (1, 3):
        x, r = rand(rng, dtype, (n, 6, 5, 8)), rand(rng, dtype, (n, 6, 5, 16))
        args = [driver.Buffer.from_numpy(a).to(gpu) for a in (x, w, b, r)]
        assert "conv[conv2d+bias+silu+residual*0.5]" in model._plan_report(*args)
        (got,) = [o.to_numpy() for o in model.execute(*args)]
        ref = reference("silu", x, w, b, r, 0.5, padding=(1, 1, 1, 1))
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=4e-2, atol=4e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_gpu_folded_constants_run_the_host_path_exactly_like_the_unfused_graph(rng, gpu, dtype):
    # every input a GPU constant: the fused step folds at load, on the host, through the conv
    # then the epilogue group — bit for bit what the unfused graph folds to
    x, w = rand(rng, dtype, (1, 6, 5, 8)), rand(rng, dtype, (3, 3, 8, 16), 1 / 8)
    b, r = rand(rng, dtype, (16,)), rand(rng, dtype, (1, 6, 5, 16))

    def fn():
        c = [ops.constant(a, dtype, GPU) for a in (x, w, b, r)]
        return block("clamp", beta=0.5)(*c)

    graph = Graph("folded", fn, input_types=[])
    assert lowered(fn, []) == ["conv[conv2d+bias+clamp+residual*0.5]"]
    (got,) = run(graph, device=gpu)
    unfused = unfused_run(graph, [], gpu)
    np.testing.assert_array_equal(got.view(np.uint8), unfused.view(np.uint8))
    ref = reference("clamp", x, w, b, r, 0.5, padding=(1, 1, 1, 1))
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=TOL[dtype], atol=TOL[dtype])
