//! Host kernels of the layout ops. They move element bytes (the dtype matters only through its
//! size), so every dtype works and results are exact. Everything is one strided copy
//! (`crate::strided`) between a view of the input and the output:
//!   * reshape, flatten, squeeze, unsqueeze, as_interleaved_complex, transfer_to (host to
//!     host): the input in row-major order;
//!   * transpose, permute: the input's strides permuted;
//!   * broadcast_to: stride 0 on broadcast axes;
//!   * band_part: a copy with the rows' out-of-band (or in-band) runs zeroed (`layout/band.rs`);
//!   * concat, stack, split, tile, pad, repeat_interleave: `layout/combine.rs`;
//!   * slice_tensor: numpy basic indexing as a view.
//!
//! The checks, the views and the messages are shared with the GPU kernels
//! (`crate::operands::layout`); this module supplies the host copy (`Copier for Kernel`) and
//! the kernels of band_part, pad and repeat_interleave.
//!
//! Shapes come from the buffers: outputs are allocated with their planned shapes, so symbolic
//! attributes (reshape targets, split sizes, tile counts) are already resolved there. Values
//! read at run time (index tensors, repeat counts, shape tensors) are checked, and a bad one is
//! an `Error::Value` naming the op. Input views may be strided; outputs are contiguous.

use max_graph::DeviceKind;
use max_graph::attrs::Attr;
use max_graph::ops::{Op, OpKind};

use crate::shared::Dynamic;
use crate::{Buffer, Device, Result};

mod band;
mod combine;
pub(crate) use crate::operands::layout::{self, Copier, check_block};
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
        Reshape | Flatten | Squeeze | Unsqueeze | AsInterleavedComplex => layout::row_major(&k),
        Transpose => layout::transpose(&k),
        Permute => layout::permute(&k),
        BroadcastTo => layout::broadcast_to(&k),
        BandPart => band::band_part(&k),
        Concat => layout::concat(&k),
        Stack => layout::stack(&k),
        Split => layout::split(&k),
        Tile => layout::tile(&k),
        Pad => combine::pad(&k),
        RepeatInterleave => combine::repeat_interleave(&k),
        Slice => layout::slice_tensor(&k),
        _ => Err(k.err("not a layout op")),
    }
}

/// repeat_interleave with a tensor of counts whose result size along the axis is a symbol not
/// bound yet (a data-dependent `out_dim`): the size is the sum of the counts (one per element
/// along the axis, or one for every element), the result is allocated with it, filled by the
/// kernel above, and the symbol is bound to it.
pub fn repeat_interleave_dynamic(op: &Op, inputs: &[Buffer]) -> Result<Dynamic> {
    let k = Kernel { op, inputs, outputs: &[] };
    let x = k.input(0)?;
    let axis = match k.opt_int("axis")? {
        Some(a) => Some(k.axis("axis", a, x.rank())?),
        None => None,
    };
    let d = axis.map_or(x.num_elements(), |a| x.shape()[a]);
    let (_, total) = layout::repeat_counts(&k, read_ints(&k, k.input(1)?, "repeats")?, d)?;
    let total = total.and_then(|n| i64::try_from(n).ok()).ok_or_else(|| k.err("the repeated size overflows"))?;
    let mut shape: Vec<i64> = x.shape().iter().map(|&n| n as i64).collect();
    match axis {
        Some(a) => shape[a] = total,
        None => shape = vec![total],
    }
    let bound = match op.attrs.get("out_dim") {
        Some(Attr::Dims(dims)) if dims.len() == 1 => match (dims[0].as_symbol(), dims[0].as_static()) {
            (Some(s), _) => vec![(s.to_string(), total)],
            (None, Some(n)) if n == total => vec![],
            (None, Some(n)) => return Err(k.err(format!("the counts repeat to {total} elements but out_dim is {n}"))),
            (None, None) => {
                return Err(k.err(format!("out_dim {} must be a plain symbol (or a static size)", dims[0])));
            }
        },
        _ => return Err(k.err("a tensor of counts needs out_dim, the repeated size")),
    };
    let out = Buffer::empty(x.dtype(), &shape, &Device::Cpu)?;
    run(op, inputs, std::slice::from_ref(&out))?;
    Ok((vec![out], bound))
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
        layout::row_major(self)
    }
}

impl<'a> Copier<'a> for Kernel<'a> {
    fn kernel(&self) -> &Kernel<'a> {
        self
    }

    fn ints(&self, b: &Buffer, what: &str) -> Result<Vec<i64>> {
        read_ints(self, b, what)
    }

    fn place(&self, x: &Buffer, v: &View, x_off: isize, out: &Buffer, out_off: usize, dst: &[isize]) -> Result<()> {
        if !check_block(self, v, out, out_off, dst, || true)? {
            return Ok(());
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
}

#[cfg(test)]
mod tests;
