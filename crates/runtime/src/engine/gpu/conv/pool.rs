//! avg_pool2d and max_pool2d over NHWC input, and fold, on the GPU (kernels/pool.cu). The
//! window and its checks are the CPU's (operands/pool.rs), including the recovery of a symbolic
//! kernel size from the input and output sizes.

use max_graph::ops::{Op, OpKind};
use max_kernels_cuda::launch::conv::{PoolGeo, PoolKind, pool};

use crate::cuda::CudaDevice;
use crate::operands::{Window, fold_window, pool_window};
use crate::{Buffer, Error, Result};

pub(super) fn pool2d(dev: &CudaDevice, op: &Op, x: &Buffer, out: &Buffer) -> Result<()> {
    let (w, count_boundary) = pool_window(op, x, out)?;
    let kind = match (op.kind, count_boundary) {
        (OpKind::MaxPool2d, _) => PoolKind::Max,
        (_, true) => PoolKind::AvgBoundary,
        (_, false) => PoolKind::AvgInside,
    };
    dev.bind()?;
    pool(&dev.stream, x.dtype(), kind, (x.addr(), out.addr()), geo(&w)).map_err(Error::from)
}

pub(super) fn fold(dev: &CudaDevice, op: &Op, x: &Buffer, out: &Buffer) -> Result<()> {
    let w = fold_window(op, x, out)?;
    dev.bind()?;
    pool(&dev.stream, x.dtype(), PoolKind::Fold, (x.addr(), out.addr()), geo(&w)).map_err(Error::from)
}

/// The window as the launcher takes it.
fn geo(w: &Window) -> PoolGeo {
    let wide = |a: [usize; 2]| a.map(|v| v as i64);
    PoolGeo {
        n: w.n as i64,
        c: w.c as i64,
        input: wide(w.input),
        output: wide(w.output),
        kernel: wide(w.kernel),
        stride: wide(w.stride),
        dil: wide(w.dil),
        pad: wide(w.pad),
    }
}
