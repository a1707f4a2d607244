"""InferenceSession, Model and TensorSpec. Compilation and execution happen in Rust
(``max._core.engine``); this module converts arguments and checks them against the graph."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import numpy as np

from max import driver
from max._core.engine import Model as _CoreModel
from max.dtype import DType
from max.graph.graph import Graph
from max.graph.type import TensorType, _from_core

CustomExtensionsType = Union[Sequence[Union[str, Path]], str, Path]


class GPUProfilingMode(str, enum.Enum):
    """How much GPU profiling information a session records (accepted for MAX compatibility)."""
    OFF = "off"
    ON = "on"
    DETAILED = "detailed"


class LogLevel(str, enum.Enum):
    """Logging verbosity levels, as MAX names them."""
    NOTSET = "notset"
    TRACE = "trace"
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


class TensorSpec:
    """A model input or output: name, shape (None for dims known only at run time) and dtype."""

    def __init__(self, shape: Sequence[int | str | None], dtype: DType, name: str) -> None:
        self._shape = list(shape)
        self._dtype = dtype
        self._name = name

    @property
    def shape(self) -> list[int | None]:
        """The dims; None for a dim known only when the model runs."""
        return [d if isinstance(d, int) else None for d in self._shape]

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self._dtype

    @property
    def name(self) -> str:
        """The input's name in the graph, or ``outputN`` for an output."""
        return self._name

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self._dtype}, name={self._name!r})"


def _spec(t: Any, name: str) -> TensorSpec:
    shape = [int(d) if d._d.kind == 0 else str(d) for d in t.shape]
    return TensorSpec(shape, t.dtype, name)


class Model:
    """A compiled graph. Create it with ``InferenceSession.load``."""

    def __init__(self, core: _CoreModel, graph: Graph, devices: list[driver.Device]) -> None:
        self._core = core
        self._devices = devices
        self._input_types = [_from_core(t) for t in core.input_types]
        self._output_types = [_from_core(t) for t in core.output_types]
        self._input_names = [f"input{i}" for i in range(len(self._input_types))]
        self.name = graph.name

    @property
    def devices(self) -> list[driver.Device]:
        """The devices the model runs on."""
        return list(self._devices)

    @property
    def input_metadata(self) -> list[TensorSpec]:
        """A TensorSpec per graph input, in order."""
        return [_spec(t, n) for t, n in zip(self._input_types, self._input_names)]

    @property
    def output_metadata(self) -> list[TensorSpec]:
        """A TensorSpec per graph output, in order."""
        return [_spec(t, f"output{i}") for i, t in enumerate(self._output_types)]

    @property
    def signature(self) -> inspect.Signature:
        """An ``inspect.Signature`` with one parameter per input, for ``execute(**named)``."""
        params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in self._input_names]
        return inspect.Signature(params)

    def _convert(self, i: int, arg: Any) -> driver.Buffer:
        t = self._input_types[i]
        if isinstance(arg, driver.Buffer):
            return arg
        if isinstance(arg, (bool, int, float, np.generic)):
            value = arg.item() if isinstance(arg, np.generic) else arg
            if not isinstance(t, TensorType) or t.rank != 0:
                raise ValueError(f"input {i}: a scalar was given but the graph expects {t}")
            buf = driver.Buffer.scalar(value, t.dtype)
            return buf.to(t.device.to_device()) if t.device.is_gpu() else buf
        if isinstance(arg, np.ndarray):
            return driver.Buffer.from_numpy(arg)
        if hasattr(arg, "__dlpack__"):
            return driver.Buffer.from_dlpack(arg)
        raise TypeError(f"input {i}: expected a Buffer, a numpy array, a DLPack array or a scalar, got {type(arg).__name__}")

    def execute(self, *args: Any) -> list[driver.Buffer]:
        """Runs the model; returns one Buffer per graph output."""
        if len(args) != len(self._input_types):
            raise ValueError(f"{self.name}: the model takes {len(self._input_types)} inputs but {len(args)} were given")
        return self._core.execute([self._convert(i, a) for i, a in enumerate(args)])

    def _execute_reusing(self, *args: Any) -> list[driver.Buffer]:
        """As ``execute``, except that a plan replayed as a CUDA graph returns the graph's own
        result buffers instead of fresh copies: the model's next execution overwrites them (in
        stream order), so every use of them must be queued on their devices before it (a
        decode step's logits, sampled at once: one copy fewer a step)."""
        if len(args) != len(self._input_types):
            raise ValueError(f"{self.name}: the model takes {len(self._input_types)} inputs but {len(args)} were given")
        return self._core.execute([self._convert(i, a) for i, a in enumerate(args)], reuse_results=True)

    def __call__(self, *args: Any, **kwargs: Any) -> list[driver.Buffer]:
        bound = self.signature.bind(*args, **kwargs)
        return self.execute(*bound.args)

    def _plan_report(self, *args: Any) -> str:
        """The plan for inputs like `args`: kernels, fused groups and the arena vs its bound."""
        bufs = [self._convert(i, a) for i, a in enumerate(args)]
        return self._core.plan_report([(b.dtype.value, list(b.shape)) for b in bufs])

    def __repr__(self) -> str:
        return f"Model({self.name!r}, inputs={self.input_metadata}, outputs={self.output_metadata})"


class InferenceSession:
    """Loads (compiles) graphs for a set of devices.

    ``num_threads`` caps the CPU worker threads of the models it loads (default: one per core).
    Set ``MAX_PRINT_PLAN=1`` to print (on stderr) each execution plan when it is built: one line
    per step with its kernel or fused group, result shapes and where each result lives (arena
    offset, view, own buffer), then the arena bytes per device and the max-live lower bound."""

    def __init__(self, devices: Iterable[driver.Device] = (), num_threads: int | None = None, *,
                 custom_extensions: CustomExtensionsType | None = None) -> None:
        self._devices = list(devices) or [driver.CPU()]
        for d in self._devices:
            if not isinstance(d, driver.Device):
                raise TypeError(f"InferenceSession: devices must be max.driver.Device objects, got {type(d).__name__}")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise ValueError(f"InferenceSession: num_threads must be a positive int, got {num_threads!r}")
        if custom_extensions:
            raise NotImplementedError("custom extensions (Mojo kernels) are not supported")
        self._num_threads = num_threads
        self._profiling = GPUProfilingMode.OFF

    @property
    def devices(self) -> list[driver.Device]:
        """The devices models of this session are compiled for."""
        return list(self._devices)

    def gpu_profiling(self, mode: GPUProfilingMode) -> None:
        """Sets the GPU profiling mode (recorded; this engine has no profiler hooks)."""
        self._profiling = GPUProfilingMode(mode)

    def load(self, model: Any, *, custom_extensions: CustomExtensionsType | None = None,
             weights_registry: Mapping[str, Any] | None = None) -> Model:
        """Compiles a staged Graph. Weights (Weight / constant_external values) come from
        `weights_registry`, name -> array (Buffer, numpy, any DLPack array, or WeightData), as
        ``Weights.allocated_weights`` gives it; host arrays are shared, not copied, unless a
        weight lives on a GPU."""
        if isinstance(model, (str, Path)):
            raise RuntimeError(f"loading a model from a path ({model}) is not supported; stage a max.graph.Graph")
        if not isinstance(model, Graph):
            raise TypeError(f"InferenceSession.load expects a max.graph.Graph, got {type(model).__name__}")
        if custom_extensions:
            raise NotImplementedError("custom extensions (Mojo kernels) are not supported")
        from max.graph.weights import WeightData

        weights = {}
        for name, value in (weights_registry or {}).items():
            if isinstance(value, WeightData):
                value = value.data
            if isinstance(value, driver.Buffer):
                weights[name] = value
            elif isinstance(value, np.ndarray):
                weights[name] = driver.Buffer.from_numpy(value)
            elif hasattr(value, "__dlpack__"):
                weights[name] = driver.Buffer.from_dlpack(value)
            else:
                raise TypeError(f"weights_registry[{name!r}]: expected an array, got {type(value).__name__}")
        core = _CoreModel.load(model._ir, self._devices, weights, self._num_threads)
        return Model(core, model, self._devices)
