"""Shared parts of the doc-example tests: the Python examples of MAX's API documentation (shared/seeds/max-api/*.md), as tests.

Each test is one ```python block of a page, transcribed faithfully: the pages' code blocks were
flattened to one line, so only line breaks and indentation were restored, and the imports the
docs forgot were added (each marked ``# added import``). Nothing else was changed: same
statements, names, values and order. Where the docs state what an example prints or returns
(``# Output: ...``, ``# Returns True``, or the prose next to it), the test captures stdout and
asserts the docs' claim after the example's own code.

The examples were found programmatically (every fenced block of the pages) and checked against
Modular's MAX 26.7. Every included example runs there too, except the ones named in
``REAL_MAX_DIFFERS``, where the docs and MAX 26.7 disagree (this project follows the docs).

Covered pages: graph.*.md, driver.md and dtype.md; the eager pages tensor.md, functional.md,
random.md, nn.module.md, nn.Embedding.md and the two guides (test_tensor.py, test_functional.py,
test_random.py, test_nn_module.py, test_guides.py, with eager_common.py's helpers) (graph.md, graph.BufferValue.md,
graph.KernelLibrary.md, graph.Weight.md and graph.shape.md have no code block). The blocks that
are left out are in ``EXCLUDED`` with a reason each, and show up as skipped tests (``pytest -rs``);
so does graph.type.md's Type example, transcribed but skipped because it is wrong in the docs.
"""

import re

import pytest

from max import driver

needs_gpu = pytest.mark.skipif(driver.accelerator_count() == 0, reason="needs a GPU")
needs_two_gpus = pytest.mark.skipif(driver.accelerator_count() < 2, reason="needs two GPUs")

# Included examples that real MAX 26.7 itself rejects, although they only stage a graph:
# - the docs leave out TensorType's `device`, which MAX 26.7 requires ("TensorType.__init__()
#   missing 1 required positional argument: 'device'"); this project defaults it to the CPU;
# - ops.constant(array, dtype=DType.float32) of a float64 or int64 numpy array: MAX 26.7 raises
#   "DType must match input dtype"; the docs of constant() ("The constant will be loaded with the
#   specified dtype") and this project convert.
# With both patched into real MAX (TensorType's device defaulting to the CPU, constant() casting
# a numpy array to `dtype`), every included example runs there.
REAL_MAX_DIFFERS = {
    "test_graph_Graph__Graph": "TensorType(DType.float32, (2,)) without device; "
    "ops.constant(np.ones((2, 2)), dtype=DType.float32) of a float64 array",
    "test_graph_Value__Value": "ops.constant(np.array([1, 2, 3]), dtype=DType.float32) of an int64 array",
    "test_graph_dim__StaticDim": "TensorType(DType.int64, (4, 5)) without device",
    "test_graph_dim__SymbolicDim_in_TensorType": "TensorType(DType.bool, (...)) without device",
    "test_graph_ops__TensorType": "TensorType(DType.float32, (2, 3)) without device",
    "test_graph_ops__gather_nd": "TensorType(DType.bfloat16, input_shape) without device",
    "test_graph_type__TensorType": "TensorType(DType.float32, (2, 3)) without device",
}

# Every other ```python / ```pycon block of the covered pages: (page, heading, reason).
EXCLUDED = [
    ("driver.md", "Buffer.disable_auto_sync",
     "fragment: buffers `a`, `b`, `c` are undefined ('Assuming we have 3 buffers')"),
    ("graph.ops.md", "band_part (1)", "not Python: pseudo-code formula `out[i, j, ..., m, n] = in_band(m, n) * ...`"),
    ("graph.ops.md", "band_part (2)", "not Python: pseudo-code formula with `||` and `&&`"),
    ("graph.ops.md", "chunk (pycon)",
     "pseudo-code: TensorValue([1, 2, 3, 4, 5]) is no constructor (TypeError in real MAX) and `chunk` is unqualified"),
    ("graph.ops.md", "cond (1)", "fragment: `pred` and `device` are undefined"),
    ("graph.ops.md", "cond (2)", "uses ops.inplace_custom; fragment: `buffer` and `pred` are undefined"),
    ("graph.ops.md", "conv2d", "plain Python lists illustrating padding; no MAX API"),
    ("graph.ops.md", "conv2d_transpose", "plain Python lists illustrating padding; no MAX API"),
    ("graph.ops.md", "conv3d", "plain Python lists illustrating padding; no MAX API"),
    ("graph.ops.md", "repeat_interleave (1)", "fragment: `x` is undefined (`input = TensorValue(x)`)"),
    ("graph.ops.md", "repeat_interleave (2)", "fragment: `input` is undefined, `repeat_interleave` unqualified"),
    ("graph.ops.md", "repeat_interleave (3)", "fragment: `input` is undefined, `repeat_interleave` unqualified"),
    ("graph.ops.md", "repeat_interleave (4)",
     "fragment: `input` is undefined; TensorValue([2, 3]) is no constructor, `repeat_interleave` unqualified"),
    ("graph.ops.md", "repeat_interleave (5)", "fragment: `input` is undefined, `repeat_interleave` unqualified"),
    ("graph.ops.md", "shape_to_tensor (pycon)",
     "fails in real MAX 26.7: ops.constant(np.zeros((1,)), DType.int64) raises 'DType must match input dtype' "
     "(float64 array), and there is no enclosing Graph ('No graph found')"),
    ("graph.ops.md", "slice_tensor", "fragment: `x` is undefined, `slice_tensor` unqualified"),
    ("graph.weights.md", "GGUFWeights", "needs a checkpoint file model-q4_k.gguf the docs don't provide"),
    ("graph.weights.md", "GGUFWeights.data", "fragment: `weights` is undefined"),
    ("graph.weights.md", "GGUFWeights.exists", "fragment: `weights` is undefined; `allocate(...)` placeholder"),
    ("graph.weights.md", "SafetensorWeights", "needs a checkpoint file model.safetensors the docs don't provide"),
    ("graph.weights.md", "SafetensorWeights.data", "fragment: `weights` is undefined"),
    ("graph.weights.md", "SafetensorWeights.exists", "fragment: `weights` is undefined; `allocate(...)` placeholder"),
    ("graph.weights.md", "WeightData.astype", "fragment: `weights` is undefined"),
    ("graph.weights.md", "Weights",
     "fails in real MAX 26.7: Graph has no weights() method (AttributeError)"),
    ("graph.weights.md", "Weights.allocate", "fragment: `weights` and `graph` are undefined"),
    ("graph.weights.md", "Weights.data", "fragment: `weights` is undefined"),
    ("graph.weights.md", "Weights.exists", "fragment: `weights` is undefined; `allocate(...)` placeholder"),
    ("graph.weights.md", "Weights.items", "fragment: `weights` is undefined"),
    ("graph.weights.md", "load_weights",
     "needs checkpoint files model-0000N-of-00003.safetensors the docs don't provide"),
]
# Not Python, so not counted as examples: graph.dim.md's ```default block
# `!mo.tensor<[batch, x, 10], si32]>` (MLIR type notation).





# --- helpers for the docs' claims -------------------------------------------------------------

_DIM_WORDS = {"Dim", "StaticDim", "SymbolicDim", "AlgebraicDim", "dim", "name"}


def printed_dims(line: str) -> list[str]:
    """The dims a printed shape shows, as text, whatever the repr of a Dim is:
    '[2, 2]', '[Dim(2), Dim(2)]', '[StaticDim(dim=2)]', "['a', Dim('f')]" all read as dims."""
    inside = line[line.index("[") : line.rindex("]") + 1]
    return [t for t in re.findall(r"[A-Za-z_]\w*|\d+", inside) if t not in _DIM_WORDS]


def dims(shape) -> list[str]:
    """A shape's dims as text: static ones as their size, symbolic ones as their name."""
    return [str(int(d)) if type(d).__name__ == "StaticDim" else str(d) for d in shape]


def lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()

