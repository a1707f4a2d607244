//! Host kernels of the layout ops. They move element bytes (the dtype matters only through its
//! size), so every dtype works and results are exact. Everything is one strided copy
//! (`layout/strided.rs`) between a view of the input and the output:
//!   * reshape, flatten, squeeze, unsqueeze, as_interleaved_complex, transfer_to (host to
//!     host): the input in row-major order;
//!   * transpose, permute: the input's strides permuted;
//!   * broadcast_to: stride 0 on broadcast axes;
//!   * band_part: a copy with the rows' out-of-band (or in-band) runs zeroed (`layout/band.rs`);
//!   * concat, stack, split, tile, pad, repeat_interleave: `layout/combine.rs`;
//!   * slice_tensor: `layout/slice.rs`.
//!
//! Shapes come from the buffers: outputs are allocated with their planned shapes, so symbolic
//! attributes (reshape targets, split sizes, tile counts) are already resolved there. Values
//! read at run time (index tensors, repeat counts, shape tensors) are checked, and a bad one is
//! an `Error::Value` naming the op. Input views may be strided; outputs are contiguous.

use max_graph::ops::{Ctx, Op, OpKind};
use max_graph::{DType, DeviceKind, GraphError};

use crate::{Buffer, Error, Result};

mod band;
mod combine;
mod slice;
pub mod strided;

use strided::View;

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    use OpKind::*;
    let k = Kernel { op, inputs, outputs };
    if let TransferTo = op.kind {
        return k.transfer_to();
    }
    k.host()?;
    match op.kind {
        Reshape | Flatten | Squeeze | Unsqueeze | AsInterleavedComplex => k.row_major(),
        Transpose => k.transpose(),
        Permute => k.permute(),
        BroadcastTo => k.broadcast_to(),
        BandPart => band::band_part(&k),
        Concat => combine::concat(&k),
        Stack => combine::stack(&k),
        Split => combine::split(&k),
        Tile => combine::tile(&k),
        Pad => combine::pad(&k),
        RepeatInterleave => combine::repeat_interleave(&k),
        Slice => slice::slice_tensor(&k),
        _ => Err(k.err("not a layout op")),
    }
}

/// One kernel call: the op and its buffers, with the helpers every layout kernel uses.
pub(crate) struct Kernel<'a> {
    pub op: &'a Op,
    pub inputs: &'a [Buffer],
    pub outputs: &'a [Buffer],
}

/// A graph error (from reading attributes) as a runtime error of the same kind.
fn graph_err(e: GraphError) -> Error {
    match e {
        GraphError::Value(m) => Error::Value(m),
        GraphError::Type(m) => Error::Type(m),
        GraphError::Index(m) => Error::Index(m),
    }
}

impl<'a> Kernel<'a> {
    pub fn name(&self) -> &'static str {
        self.op.kind.name()
    }

    /// A ValueError naming the op.
    pub fn err(&self, msg: impl AsRef<str>) -> Error {
        Error::Value(format!("{}: {}", self.name(), msg.as_ref()))
    }

    /// The attribute reader of the op's inference (no input types: messages name the op and
    /// the attribute).
    pub fn ctx(&self) -> Ctx<'a> {
        Ctx { kind: self.op.kind, inputs: &[], attrs: &self.op.attrs }
    }

    pub fn int(&self, key: &str) -> Result<i64> {
        self.ctx().int(key).map_err(graph_err)
    }

    pub fn opt_int(&self, key: &str) -> Result<Option<i64>> {
        self.ctx().opt_int(key).map_err(graph_err)
    }

    pub fn ints(&self, key: &str) -> Result<&'a [i64]> {
        self.ctx().ints(key).map_err(graph_err)
    }

    pub fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        self.ctx().boolean(key, default).map_err(graph_err)
    }

    /// A normalised axis of a rank-`rank` value.
    pub fn axis(&self, key: &str, raw: i64, rank: usize) -> Result<usize> {
        self.ctx().axis(key, raw, rank).map_err(graph_err)
    }

    pub fn input(&self, i: usize) -> Result<&'a Buffer> {
        self.inputs.get(i).ok_or_else(|| self.err(format!("expected an input #{i}, got {} inputs", self.inputs.len())))
    }

    pub fn output(&self, i: usize) -> Result<&'a Buffer> {
        self.outputs
            .get(i)
            .ok_or_else(|| self.err(format!("expected an output #{i}, got {} outputs", self.outputs.len())))
    }

    /// Every buffer on the host.
    fn host(&self) -> Result<()> {
        for b in self.inputs.iter().chain(self.outputs) {
            if !b.device().is_host() {
                return Err(self.err(format!(
                    "the CPU kernel got a buffer on {}; this op has no GPU kernel yet",
                    b.device().label()
                )));
            }
        }
        Ok(())
    }

    /// Output `i`, checked to have `x`'s dtype and to be contiguous, with its element size.
    pub fn out_like(&self, i: usize, x: &Buffer) -> Result<&'a Buffer> {
        let out = self.output(i)?;
        if out.dtype() != x.dtype() {
            return Err(self.err(format!("the result's dtype {} differs from the input's {}", out.dtype(), x.dtype())));
        }
        if !out.is_contiguous() {
            return Err(self.err("the result buffer must be contiguous"));
        }
        Ok(out)
    }

    /// The error for a result whose planned shape does not match what the inputs give.
    pub fn shape_err(&self, want: &[usize], got: &[usize]) -> Error {
        self.err(format!("the inputs give a result of shape {want:?} but the result was planned as {got:?}"))
    }

    /// Copies the view `v` of `x` into the whole (contiguous) output `out`.
    pub fn gather(&self, x: &Buffer, v: &View, out: &Buffer) -> Result<()> {
        let n: usize = v.shape.iter().product();
        if n != out.num_elements() {
            return Err(self.shape_err(&v.shape, out.shape()));
        }
        let dst = strided::contiguous_strides(&v.shape);
        // SAFETY: `v` stays inside `x`'s elements (callers build it from x's shape and
        // strides), the output holds n elements and is a different allocation (or arena range)
        // than the input.
        unsafe { strided::copy(x.addr() as *const u8, v, out.addr() as *mut u8, &dst, elem(x)) };
        Ok(())
    }

    /// Copies the view `v` of `x` (its element 0 `x_off` elements from x's) into `out`, at
    /// `out_off` elements with the non-negative strides `dst`. The destination range is
    /// checked against the output's size.
    pub fn place(&self, x: &Buffer, v: &View, x_off: isize, out: &Buffer, out_off: usize, dst: &[isize]) -> Result<()> {
        if v.shape.contains(&0) {
            return Ok(());
        }
        let reach = v.shape.iter().zip(dst).map(|(&d, &s)| (d - 1) * s.max(0) as usize).sum::<usize>();
        if dst.len() != v.shape.len() || dst.iter().any(|s| *s < 0) || out_off + reach >= out.num_elements() {
            return Err(self.err(format!(
                "a block of shape {:?} does not fit the result of shape {:?}",
                v.shape,
                out.shape()
            )));
        }
        let e = elem(x);
        // SAFETY: the destination range was checked above; the source view is built by the
        // callers from x's shape and strides, after checking its extents against x's.
        unsafe {
            strided::copy(
                (x.addr() as *const u8).offset(x_off * e as isize),
                v,
                (out.addr() as *mut u8).add(out_off * e),
                dst,
                e,
            )
        };
        Ok(())
    }

    /// The ops whose result is the input's elements in row-major order, reshaped.
    fn row_major(&self) -> Result<()> {
        let x = self.input(0)?;
        let out = self.out_like(0, x)?;
        if x.num_elements() != out.num_elements() {
            return Err(self.shape_err(x.shape(), out.shape()));
        }
        self.gather(x, &view(x), out)
    }

    fn transfer_to(&self) -> Result<()> {
        let x = self.input(0)?;
        let target = self.ctx().device("device").map_err(graph_err)?;
        let out = self.output(0)?;
        if target.kind == DeviceKind::Gpu || !out.device().is_host() {
            return Err(self.err(format!("transfers to {target} have no kernel yet (only host to host is supported)")));
        }
        if !x.device().is_host() {
            return Err(self.err(format!(
                "transfers from a {} buffer have no kernel yet (only host to host is supported)",
                x.device().label()
            )));
        }
        self.row_major()
    }

    /// The input view with its axes in the order `perm` (output axis i is input axis perm[i]).
    fn permuted(&self, perm: &[usize]) -> Result<()> {
        let x = self.input(0)?;
        let out = self.out_like(0, x)?;
        let v = view(x);
        let p = View {
            shape: perm.iter().map(|&a| v.shape[a]).collect(),
            strides: perm.iter().map(|&a| v.strides[a]).collect(),
        };
        if p.shape != out.shape() {
            return Err(self.shape_err(&p.shape, out.shape()));
        }
        self.gather(x, &p, out)
    }

    fn transpose(&self) -> Result<()> {
        let rank = self.input(0)?.rank();
        let a = self.axis("axis_1", self.int("axis_1")?, rank.max(1))?;
        let b = self.axis("axis_2", self.int("axis_2")?, rank.max(1))?;
        let mut perm: Vec<usize> = (0..rank).collect();
        if rank > 0 {
            perm.swap(a, b);
        }
        self.permuted(&perm)
    }

    fn permute(&self) -> Result<()> {
        let rank = self.input(0)?.rank();
        let dims = self.ints("dims")?;
        if dims.len() != rank {
            return Err(self.err(format!("dims {dims:?} has {} entries for rank {rank}", dims.len())));
        }
        let mut seen = vec![false; rank];
        let mut perm = Vec::with_capacity(rank);
        for &d in dims {
            let a = self.axis("dims", d, rank)?;
            if std::mem::replace(&mut seen[a], true) {
                return Err(self.err(format!("dims {dims:?} names axis {a} twice")));
            }
            perm.push(a);
        }
        self.permuted(&perm)
    }

    fn broadcast_to(&self) -> Result<()> {
        let x = self.input(0)?;
        let out = self.out_like(0, x)?;
        let target = out.shape();
        if let Some(s) = self.inputs.get(1) {
            // The shape tensor is read now; it must agree with the planned result.
            let given = read_ints(self, s, "shape")?;
            if given.len() != target.len() || given.iter().zip(target).any(|(g, t)| *g != *t as i64) {
                return Err(self.err(format!(
                    "the shape tensor holds {given:?} but the result was declared with out_dims {target:?}"
                )));
            }
        }
        if target.len() < x.rank() {
            return Err(self.shape_err(x.shape(), target));
        }
        let lead = target.len() - x.rank();
        let v = view(x);
        let mut b = View { shape: target.to_vec(), strides: vec![0; target.len()] };
        for (i, (&d, &s)) in v.shape.iter().zip(&v.strides).enumerate() {
            let t = target[lead + i];
            if d == t {
                b.strides[lead + i] = s;
            } else if d != 1 {
                return Err(self.err(format!(
                    "input dimension {i} ({d}) must be 1 or equal to target dimension {} ({t}) of {target:?}",
                    lead + i
                )));
            }
        }
        self.gather(x, &b, out)
    }
}

/// The element size of `b`'s dtype in bytes.
pub(crate) fn elem(b: &Buffer) -> usize {
    b.dtype().size_in_bytes()
}

/// `b`'s shape and element strides.
pub(crate) fn view(b: &Buffer) -> View {
    View { shape: b.shape().to_vec(), strides: b.strides().to_vec() }
}

/// The values of an integer tensor (any integer dtype, any layout) as i64, for counts, shapes
/// and indices read at run time.
pub(crate) fn read_ints(k: &Kernel, b: &Buffer, what: &str) -> Result<Vec<i64>> {
    let dt = b.dtype();
    if !dt.is_integral() {
        return Err(k.err(format!("{what}: expected an integer tensor, got {dt}")));
    }
    let n = b.num_elements();
    let width = elem(b);
    let mut bytes = vec![0u8; n * width];
    // SAFETY: the view of `b` is valid memory; `bytes` holds its n elements.
    let dst = strided::contiguous_strides(b.shape());
    unsafe { strided::copy(b.addr() as *const u8, &view(b), bytes.as_mut_ptr(), &dst, width) };
    let mut out = Vec::with_capacity(n);
    for c in bytes.chunks_exact(width) {
        let mut w = [0u8; 8];
        w[..width].copy_from_slice(c);
        let raw = u64::from_le_bytes(w);
        let v = match dt {
            DType::Int8 => raw as u8 as i8 as i64,
            DType::Int16 => raw as u16 as i16 as i64,
            DType::Int32 => raw as u32 as i32 as i64,
            DType::Int64 => raw as i64,
            DType::UInt64 if raw > i64::MAX as u64 => {
                return Err(k.err(format!("{what}: the value {raw} is too large")));
            }
            _ => raw as i64,
        };
        out.push(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
