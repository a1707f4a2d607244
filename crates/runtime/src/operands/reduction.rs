//! What the reduction kernels of both backends read from their op: the split of the input
//! around the reduced axis (the graph's `ReduceAxis` over the input's shape) and layer_norm's
//! operands.

use max_graph::ops::Op;
use max_graph::ops::reduction::{ReduceAxis, layer_norm_params, reduce_axis};

use super::graph_err;
use crate::{Buffer, Error, Result};

/// `x` split around the op's `axis` attribute as (outer, n, inner): the elements before the
/// axis, along it and after it (a scalar is one element when `need_rank` is false).
pub(crate) fn axis_lines(op: &Op, x: &Buffer, need_rank: bool) -> Result<(usize, usize, usize)> {
    let name = op.kind.name();
    let axis = reduce_axis(op).map_err(graph_err)?;
    let shape = x.shape();
    if shape.is_empty() && !need_rank && axis.of_rank(1).is_some() {
        return Ok((1, 1, 1));
    }
    let Some(a) = axis.of_rank(shape.len()) else {
        let ReduceAxis(axis) = axis;
        return Err(Error::Index(format!("{name}: axis {axis} is out of range for shape {shape:?}")));
    };
    Ok((shape[..a].iter().product(), shape[a], shape[a + 1..].iter().product()))
}

/// layer_norm's gamma, beta (inputs 1 and 2) and epsilon.
pub(crate) fn layer_norm_args<'a>(op: &Op, inputs: &'a [Buffer]) -> Result<(&'a Buffer, &'a Buffer, f64)> {
    let name = op.kind.name();
    let (Some(gamma), Some(beta)) = (inputs.get(1), inputs.get(2)) else {
        return Err(Error::Value(format!("{name}: expected input, gamma and beta")));
    };
    let eps = layer_norm_params(op).map_err(graph_err)?.epsilon;
    Ok((gamma, beta, eps))
}
