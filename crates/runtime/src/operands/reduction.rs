//! What the reduction kernels of both backends read from their op: the split of the input
//! around the reduced axis and layer_norm's operands.

use max_graph::attrs::Attr;
use max_graph::ops::Op;

use crate::{Buffer, Error, Result};

/// `x` split around the op's `axis` attribute as (outer, n, inner): the elements before the
/// axis, along it and after it (a scalar is one element when `need_rank` is false).
pub(crate) fn axis_lines(op: &Op, x: &Buffer, need_rank: bool) -> Result<(usize, usize, usize)> {
    let name = op.kind.name();
    let axis = match op.attrs.get("axis") {
        Some(Attr::Int(a)) => *a,
        _ => return Err(Error::Value(format!("{name}: axis: expected an integer"))),
    };
    let shape = x.shape();
    let rank = shape.len() as i64;
    if rank == 0 && !need_rank && (axis == 0 || axis == -1) {
        return Ok((1, 1, 1));
    }
    let a = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&a) {
        return Err(Error::Index(format!("{name}: axis {axis} is out of range for shape {shape:?}")));
    }
    let a = a as usize;
    Ok((shape[..a].iter().product(), shape[a], shape[a + 1..].iter().product()))
}

/// layer_norm's gamma, beta (inputs 1 and 2) and epsilon.
pub(crate) fn layer_norm_args<'a>(op: &Op, inputs: &'a [Buffer]) -> Result<(&'a Buffer, &'a Buffer, f64)> {
    let name = op.kind.name();
    let (Some(gamma), Some(beta)) = (inputs.get(1), inputs.get(2)) else {
        return Err(Error::Value(format!("{name}: expected input, gamma and beta")));
    };
    let eps = match op.attrs.get("epsilon") {
        Some(Attr::Float(e)) => *e,
        Some(Attr::Int(e)) => *e as f64,
        _ => return Err(Error::Value(format!("{name}: epsilon: expected a number"))),
    };
    Ok((gamma, beta, eps))
}
