//! GPU kernels of the layout ops: the checks, views and messages are the CPU's, written once in
//! `operands::layout`; this module supplies the device copy (`Copier for Gpu`). Every op is one
//! or more strided copies between a view of an input and (a block of) an output
//! (`launch::layout::copy_view`, which picks the tiled transpose and 16-byte paths), except pad
//! and band_part (their own kernels) and repeat_interleave with a tensor of counts (a row
//! gather). Values read at run time (slice index tensors, repeat counts, shape tensors) are
//! copied to the host first: they are a few elements.

use max_graph::{Op, OpKind};
use max_kernels_cuda::launch::{indexing as ki, layout as kl};

use super::indexing::upload_i64;
use crate::cuda::CudaDevice;
use crate::operands::layout::{self, Band, Copier, Pad, Repeat, band_plan, check_block, pad_plan, repeat_plan};
use crate::operands::{Kernel, read_ints, view};
use crate::strided::View;
use crate::{Buffer, Device, Error, Result};

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    use OpKind::*;
    let k = Gpu { dev, k: Kernel { op, inputs, outputs } };
    dev.bind()?;
    match op.kind {
        TransferTo => k.transfer_to(),
        Reshape | Flatten | Squeeze | Unsqueeze | AsInterleavedComplex => layout::row_major(&k),
        Transpose => layout::transpose(&k),
        Permute => layout::permute(&k),
        BroadcastTo => layout::broadcast_to(&k),
        BandPart => k.band_part(),
        Concat => layout::concat(&k),
        Stack => layout::stack(&k),
        Split => layout::split(&k),
        Tile => layout::tile(&k),
        Pad => k.pad(),
        RepeatInterleave => k.repeat_interleave(),
        Slice => layout::slice_tensor(&k),
        _ => Err(k.k.err("not a layout op")),
    }
}

/// One layout step on a GPU: the shared attribute and buffer helpers (operands.rs), and the device.
pub(super) struct Gpu<'a> {
    pub dev: &'a CudaDevice,
    pub k: Kernel<'a>,
}

fn elem(b: &Buffer) -> usize {
    b.dtype().size_in_bytes()
}

/// The address `offset` elements (possibly negative) from `b`'s element 0.
fn at(b: &Buffer, offset: isize) -> u64 {
    (b.addr() as i128 + offset as i128 * elem(b) as i128) as u64
}

/// Whether the (non-empty) view `shape`/`strides` at element `offset` lies inside `x`'s own
/// view of its storage (every reached element is one of x's elements' addresses range).
fn inside(x: &Buffer, v: &View, offset: isize) -> bool {
    let reach = |shape: &[usize], strides: &[isize], base: isize| {
        let (mut lo, mut hi) = (base, base);
        for (&d, &s) in shape.iter().zip(strides) {
            let r = (d as isize - 1) * s;
            if r < 0 { lo += r } else { hi += r }
        }
        (lo, hi)
    };
    let (lo, hi) = reach(&v.shape, &v.strides, offset);
    let (xlo, xhi) = reach(x.shape(), x.strides(), 0);
    lo >= xlo && hi <= xhi
}

impl Gpu<'_> {
    fn stream(&self) -> &std::sync::Arc<cudarc::driver::CudaStream> {
        &self.dev.stream
    }

    fn transfer_to(&self) -> Result<()> {
        let x = self.k.input(0)?;
        let out = self.k.out_like(0, x)?;
        if x.num_elements() != out.num_elements() {
            return Err(self.k.shape_err(x.shape(), out.shape()));
        }
        if x.device() == out.device() {
            return self.gather(x, &view(x), out);
        }
        // Another device: a peer copy straight into the result (no staging copy, so a CUDA
        // graph can hold it).
        if x.is_contiguous() { out.inplace_copy_from(x) } else { out.inplace_copy_from(&x.contiguous()?) }
    }

    fn band_part(&self) -> Result<()> {
        let Band { x, out, rows, cols, lower, upper, exclude } = band_plan(&self.k)?;
        // The kernel takes -1 for a whole triangle.
        let bands = [lower, upper].map(|b| b.map_or(-1, |n| n as i64));
        let packed;
        let x = if x.is_contiguous() {
            x
        } else {
            packed = x.contiguous()?;
            &packed
        };
        let n = out.num_elements() as u64;
        kl::band_part(self.stream(), x.addr(), out.addr(), n, (rows, cols), (bands[0], bands[1]), exclude, elem(x))
            .map_err(Error::from)
    }

    fn pad(&self) -> Result<()> {
        let k = &self.k;
        let Pad { x, value, out, paddings } = pad_plan(k)?;
        if !value.device().is_host() && value.device() != out.device() {
            return Err(k.err("the pad value must be on the result's device"));
        }
        let value = if value.device().is_host() { value.to(out.device())? } else { value.clone() };
        let lo: Vec<usize> = paddings.chunks(2).map(|p| p[0] as usize).collect();
        kl::pad(self.stream(), x.addr(), x.strides(), x.shape(), value.addr(), out.addr(), out.shape(), &lo, elem(x))
            .map_err(Error::from)
    }

    fn repeat_interleave(&self) -> Result<()> {
        let (x, out, (outer, d, inner, c)) = match repeat_plan(self)? {
            (x, out, Repeat::View(r)) => return self.gather(x, &r, out),
            (x, out, Repeat::Rows { outer, d, inner, counts }) => (x, out, (outer, d, inner, counts)),
        };
        if out.num_elements() == 0 {
            return Ok(());
        }
        // Output row p along the axis is input row which[p]: a row gather.
        let which: Vec<i64> =
            c.iter().enumerate().flat_map(|(j, &n)| std::iter::repeat_n(j as i64, n as usize)).collect();
        let rows = upload_i64(&which, out)?;
        let packed;
        let src = if x.is_contiguous() {
            x
        } else {
            packed = x.contiguous()?;
            &packed
        };
        ki::gather_rows(self.stream(), src.addr(), out.addr(), rows.addr(), (outer, which.len(), d), inner, elem(x))
            .map_err(Error::from)
    }
}

impl<'a> Copier<'a> for Gpu<'a> {
    fn kernel(&self) -> &Kernel<'a> {
        &self.k
    }

    /// The values of a device tensor (a few elements), copied to the host.
    fn ints(&self, b: &Buffer, what: &str) -> Result<Vec<i64>> {
        let host = b.to(&Device::Cpu)?;
        read_ints(&self.k, &host, what)
    }

    /// The copy through `launch::layout::copy_view`; the source range is checked against x's
    /// own view as well.
    fn place(&self, x: &Buffer, v: &View, x_off: isize, out: &Buffer, out_off: usize, dst: &[isize]) -> Result<()> {
        if !check_block(&self.k, v, out, out_off, dst, || inside(x, v, x_off))? {
            return Ok(());
        }
        let e = elem(x);
        kl::copy_view(self.stream(), at(x, x_off), &v.strides, at(out, out_off as isize), dst, &v.shape, e)
            .map_err(Error::from)
    }
}
