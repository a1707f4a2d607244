//! Host kernels of the layout ops. They move element bytes (the dtype matters only through its
//! size), so every dtype works and results are exact. Everything is one strided copy
//! (`crate::strided`) between a view of the input and the output:
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

use max_graph::DeviceKind;
use max_graph::ops::{Op, OpKind};

use crate::{Buffer, Result};

mod band;
mod combine;
mod slice;
pub(crate) use crate::operands::{Kernel, elem, graph_err, read_ints, view};
pub(crate) use crate::strided;

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

impl Kernel<'_> {
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

#[cfg(test)]
mod tests;
