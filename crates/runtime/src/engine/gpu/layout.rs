//! GPU kernels of the layout ops: the CUDA twins of cpu/layout.rs, with the same checks and
//! messages (attributes are read through the shared `operands::Kernel` helpers). Every op is one or
//! more strided copies between a view of an input and (a block of) an output
//! (`launch::layout::copy_view`, which picks the tiled transpose and 16-byte paths), except pad
//! and band_part (their own kernels) and repeat_interleave with a tensor of counts (a row
//! gather). Values read at run time (slice index tensors, repeat counts, shape tensors) are
//! copied to the host first: they are a few elements.

use max_graph::{Dim, Op, OpKind};
use max_kernels_cuda::launch::{indexing as ki, layout as kl};

use super::indexing::{kernel_err, upload_i64};
use crate::cuda::CudaDevice;
pub(super) use crate::operands::graph_err;
use crate::operands::{Kernel, read_ints, view};
use crate::strided::{View, contiguous_strides};
use crate::{Buffer, Device, Result};

mod slice;

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    use OpKind::*;
    let k = Gpu { dev, k: Kernel { op, inputs, outputs } };
    dev.bind()?;
    match op.kind {
        TransferTo => k.transfer_to(),
        Reshape | Flatten | Squeeze | Unsqueeze | AsInterleavedComplex => k.row_major(),
        Transpose => k.transpose(),
        Permute => k.permute(),
        BroadcastTo => k.broadcast_to(),
        BandPart => k.band_part(),
        Concat => k.concat(),
        Stack => k.stack(),
        Split => k.split(),
        Tile => k.tile(),
        Pad => k.pad(),
        RepeatInterleave => k.repeat_interleave(),
        Slice => slice::slice_tensor(&k),
        _ => Err(k.k.err("not a layout op")),
    }
}

/// One layout step on a GPU: the shared attribute and buffer helpers (operands.rs), and the device.
pub(super) struct Gpu<'a> {
    pub dev: &'a CudaDevice,
    pub k: Kernel<'a>,
}

/// The integer values of a (small) device tensor, read on the host.
pub(super) fn host_ints(k: &Kernel, b: &Buffer, what: &str) -> Result<Vec<i64>> {
    let host = b.to(&Device::Cpu)?;
    read_ints(k, &host, what)
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

    /// Copies the view `v` of `x` into the whole (contiguous) output `out`.
    fn gather(&self, x: &Buffer, v: &View, out: &Buffer) -> Result<()> {
        let n: usize = v.shape.iter().product();
        if n != out.num_elements() {
            return Err(self.k.shape_err(&v.shape, out.shape()));
        }
        self.place(x, v, 0, out, 0, &contiguous_strides(&v.shape))
    }

    /// Copies the view `v` of `x` (its element 0 `x_off` elements from x's) into `out`, at
    /// `out_off` elements with the non-negative strides `dst`; the destination range is checked
    /// against the output's size, the source range against x's.
    pub(super) fn place(
        &self,
        x: &Buffer,
        v: &View,
        x_off: isize,
        out: &Buffer,
        out_off: usize,
        dst: &[isize],
    ) -> Result<()> {
        if v.shape.contains(&0) {
            return Ok(());
        }
        let reach = v.shape.iter().zip(dst).map(|(&d, &s)| (d - 1) * s.max(0) as usize).sum::<usize>();
        if dst.len() != v.shape.len()
            || dst.iter().any(|s| *s < 0)
            || out_off + reach >= out.num_elements()
            || !inside(x, v, x_off)
        {
            return Err(self.k.err(format!(
                "a block of shape {:?} does not fit the result of shape {:?}",
                v.shape,
                out.shape()
            )));
        }
        let e = elem(x);
        kl::copy_view(self.stream(), at(x, x_off), &v.strides, at(out, out_off as isize), dst, &v.shape, e)
            .map_err(kernel_err)
    }

    fn row_major(&self) -> Result<()> {
        let x = self.k.input(0)?;
        let out = self.k.out_like(0, x)?;
        if x.num_elements() != out.num_elements() {
            return Err(self.k.shape_err(x.shape(), out.shape()));
        }
        self.gather(x, &view(x), out)
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
        // Another device (the engine normally moves inputs first): a plain transfer.
        out.inplace_copy_from(&x.contiguous()?)
    }

    fn permuted(&self, perm: &[usize]) -> Result<()> {
        let x = self.k.input(0)?;
        let out = self.k.out_like(0, x)?;
        let v = view(x);
        let p = View {
            shape: perm.iter().map(|&a| v.shape[a]).collect(),
            strides: perm.iter().map(|&a| v.strides[a]).collect(),
        };
        if p.shape != out.shape() {
            return Err(self.k.shape_err(&p.shape, out.shape()));
        }
        self.gather(x, &p, out)
    }

    fn transpose(&self) -> Result<()> {
        let k = &self.k;
        let rank = k.input(0)?.rank();
        let a = k.axis("axis_1", k.int("axis_1")?, rank.max(1))?;
        let b = k.axis("axis_2", k.int("axis_2")?, rank.max(1))?;
        let mut perm: Vec<usize> = (0..rank).collect();
        if rank > 0 {
            perm.swap(a, b);
        }
        self.permuted(&perm)
    }

    fn permute(&self) -> Result<()> {
        let k = &self.k;
        let rank = k.input(0)?.rank();
        let dims = k.ints("dims")?;
        if dims.len() != rank {
            return Err(k.err(format!("dims {dims:?} has {} entries for rank {rank}", dims.len())));
        }
        let mut seen = vec![false; rank];
        let mut perm = Vec::with_capacity(rank);
        for &d in dims {
            let a = k.axis("dims", d, rank)?;
            if std::mem::replace(&mut seen[a], true) {
                return Err(k.err(format!("dims {dims:?} names axis {a} twice")));
            }
            perm.push(a);
        }
        self.permuted(&perm)
    }

    fn broadcast_to(&self) -> Result<()> {
        let k = &self.k;
        let x = k.input(0)?;
        let out = k.out_like(0, x)?;
        let target = out.shape();
        if let Some(s) = k.inputs.get(1) {
            let given = host_ints(k, s, "shape")?;
            if given.len() != target.len() || given.iter().zip(target).any(|(g, t)| *g != *t as i64) {
                return Err(k.err(format!(
                    "the shape tensor holds {given:?} but the result was declared with out_dims {target:?}"
                )));
            }
        }
        if target.len() < x.rank() {
            return Err(k.shape_err(x.shape(), target));
        }
        let lead = target.len() - x.rank();
        let v = view(x);
        let mut b = View { shape: target.to_vec(), strides: vec![0; target.len()] };
        for (i, (&d, &s)) in v.shape.iter().zip(&v.strides).enumerate() {
            let t = target[lead + i];
            if d == t {
                b.strides[lead + i] = s;
            } else if d != 1 {
                return Err(k.err(format!(
                    "input dimension {i} ({d}) must be 1 or equal to target dimension {} ({t}) of {target:?}",
                    lead + i
                )));
            }
        }
        self.gather(x, &b, out)
    }

    fn band_part(&self) -> Result<()> {
        let k = &self.k;
        let x = k.input(0)?;
        let out = k.out_like(0, x)?;
        if out.shape() != x.shape() {
            return Err(k.shape_err(x.shape(), out.shape()));
        }
        let rank = x.rank();
        if rank < 2 {
            return Err(k.err(format!("needs rank 2 or more, got shape {:?}", x.shape())));
        }
        let (rows, cols) = (x.shape()[rank - 2], x.shape()[rank - 1]);
        let exclude = k.boolean("exclude", false)?;
        let mut bands = [-1i64, -1];
        for (slot, key) in bands.iter_mut().zip(["num_lower", "num_upper"]) {
            match k.opt_int(key)? {
                None | Some(-1) => {}
                Some(n) if n < -1 => {
                    return Err(
                        k.err(format!("{key} must be non-negative (or None or -1 for the whole triangle), got {n}"))
                    );
                }
                Some(n) => *slot = n,
            }
        }
        let packed;
        let x = if x.is_contiguous() {
            x
        } else {
            packed = x.contiguous()?;
            &packed
        };
        let n = out.num_elements() as u64;
        kl::band_part(self.stream(), x.addr(), out.addr(), n, (rows, cols), (bands[0], bands[1]), exclude, elem(x))
            .map_err(kernel_err)
    }

    /// Every input has the dtype of the first.
    fn same_dtype(&self) -> Result<()> {
        let first = self.k.input(0)?.dtype();
        for (i, b) in self.k.inputs.iter().enumerate().skip(1) {
            if b.dtype() != first {
                return Err(self.k.err(format!("input {i} is {} but input 0 is {first}", b.dtype())));
            }
        }
        Ok(())
    }

    fn concat(&self) -> Result<()> {
        let k = &self.k;
        self.same_dtype()?;
        let out = k.out_like(0, k.input(0)?)?;
        let rank = out.rank();
        let axis = k.axis("axis", k.int("axis")?, rank)?;
        let dst = contiguous_strides(out.shape());
        let mut at = 0usize;
        for (i, x) in k.inputs.iter().enumerate() {
            let fits = x.rank() == rank
                && x.shape().iter().zip(out.shape()).enumerate().all(|(d, (a, b))| d == axis || a == b);
            if !fits {
                return Err(k.err(format!(
                    "input {i} of shape {:?} does not match the result {:?} off axis {axis}",
                    x.shape(),
                    out.shape()
                )));
            }
            if at + x.shape()[axis] > out.shape()[axis] {
                return Err(k.shape_err(x.shape(), out.shape()));
            }
            self.place(x, &view(x), 0, out, at * dst[axis] as usize, &dst)?;
            at += x.shape()[axis];
        }
        if at != out.shape()[axis] {
            return Err(
                k.err(format!("the inputs add up to {at} along axis {axis} but the result has {}", out.shape()[axis]))
            );
        }
        Ok(())
    }

    fn stack(&self) -> Result<()> {
        let k = &self.k;
        self.same_dtype()?;
        let out = k.out_like(0, k.input(0)?)?;
        let axis = k.axis("axis", k.int("axis")?, out.rank())?;
        let mut each = out.shape().to_vec();
        each.remove(axis);
        if out.shape()[axis] != k.inputs.len() {
            return Err(k.err(format!(
                "{} inputs stacked into a result with {} entries along axis {axis}",
                k.inputs.len(),
                out.shape()[axis]
            )));
        }
        let all = contiguous_strides(out.shape());
        let mut dst = all.clone();
        dst.remove(axis);
        for (i, x) in k.inputs.iter().enumerate() {
            if x.shape() != each {
                return Err(k.shape_err(x.shape(), &each));
            }
            self.place(x, &view(x), 0, out, i * all[axis] as usize, &dst)?;
        }
        Ok(())
    }

    fn split(&self) -> Result<()> {
        let k = &self.k;
        let x = k.input(0)?;
        let rank = x.rank();
        let axis = k.axis("axis", k.int("axis")?, rank)?;
        let v = view(x);
        let mut at = 0usize;
        for i in 0..k.outputs.len() {
            let out = k.out_like(i, x)?;
            let fits = out.rank() == rank
                && out.shape().iter().zip(x.shape()).enumerate().all(|(d, (a, b))| d == axis || a == b);
            if !fits || at + out.shape()[axis] > x.shape()[axis] {
                return Err(k.err(format!(
                    "result {i} of shape {:?} does not fit the rest of the input {:?} along axis {axis}",
                    out.shape(),
                    x.shape()
                )));
            }
            let part = View { shape: out.shape().to_vec(), strides: v.strides.clone() };
            let off = at as isize * v.strides[axis];
            self.place(x, &part, off, out, 0, &contiguous_strides(out.shape()))?;
            at += out.shape()[axis];
        }
        if at != x.shape()[axis] {
            return Err(
                k.err(format!("the results add up to {at} along axis {axis} but the input has {}", x.shape()[axis]))
            );
        }
        Ok(())
    }

    fn tile(&self) -> Result<()> {
        // The result, row-major, is the view [r0, d0, r1, d1, ...] of the input with stride 0
        // on the repeat axes (counts: the planned result's dims over the input's).
        let k = &self.k;
        let x = k.input(0)?;
        let out = k.out_like(0, x)?;
        if out.rank() != x.rank() {
            return Err(k.shape_err(x.shape(), out.shape()));
        }
        let v = view(x);
        let mut t = View { shape: Vec::with_capacity(2 * x.rank()), strides: Vec::with_capacity(2 * x.rank()) };
        for (i, (&d, &o)) in x.shape().iter().zip(out.shape()).enumerate() {
            let r = o.checked_div(d).unwrap_or(usize::from(o == 0));
            if r == 0 || d * r != o {
                return Err(k.err(format!(
                    "the result's shape {:?} is not a tiling of the input's {:?}",
                    out.shape(),
                    x.shape()
                )));
            }
            t.shape.extend([r, d]);
            t.strides.extend([0, v.strides[i]]);
        }
        self.gather(x, &t, out)
    }

    fn pad(&self) -> Result<()> {
        let k = &self.k;
        let x = k.input(0)?;
        let value = k.input(1)?;
        let out = k.out_like(0, x)?;
        if value.dtype() != x.dtype() || value.num_elements() != 1 {
            return Err(k.err(format!(
                "the pad value must be one {} element, got {} of shape {:?}",
                x.dtype(),
                value.dtype(),
                value.shape()
            )));
        }
        let paddings = k.ints("paddings")?;
        let ok = paddings.len() == 2 * x.rank()
            && out.rank() == x.rank()
            && paddings.iter().all(|p| *p >= 0)
            && x.shape()
                .iter()
                .zip(out.shape())
                .zip(paddings.chunks(2))
                .all(|((&d, &o), p)| d as u128 + p[0] as u128 + p[1] as u128 == o as u128);
        if !ok {
            return Err(k.err(format!(
                "paddings {paddings:?} of an input of shape {:?} do not give the result's {:?}",
                x.shape(),
                out.shape()
            )));
        }
        if !value.device().is_host() && value.device() != out.device() {
            return Err(k.err("the pad value must be on the result's device"));
        }
        let value = if value.device().is_host() { value.to(out.device())? } else { value.clone() };
        let lo: Vec<usize> = paddings.chunks(2).map(|p| p[0] as usize).collect();
        kl::pad(self.stream(), x.addr(), x.strides(), x.shape(), value.addr(), out.addr(), out.shape(), &lo, elem(x))
            .map_err(kernel_err)
    }

    fn repeat_interleave(&self) -> Result<()> {
        let k = &self.k;
        let x = k.input(0)?;
        let out = k.out_like(0, x)?;
        let v = view(x);
        let (shape, axis) = match k.opt_int("axis")? {
            Some(a) => (v.shape.clone(), k.axis("axis", a, x.rank())?),
            None => (vec![x.num_elements()], 0),
        };
        let mut want = shape.clone();
        let Some(counts) = k.inputs.get(1) else {
            let n = k.int("repeats")?;
            if n <= 0 {
                return Err(k.err(format!("repeats must be positive, got {n}")));
            }
            want[axis] = shape[axis].saturating_mul(n as usize);
            if want != out.shape() {
                return Err(k.shape_err(&want, out.shape()));
            }
            // Row-major order of the input's view with a stride-0 axis of n after `axis`
            // (after the last axis when flattening).
            let at = match k.opt_int("axis")? {
                Some(_) => axis + 1,
                None => x.rank(),
            };
            let mut r = v.clone();
            r.shape.insert(at, n as usize);
            r.strides.insert(at, 0);
            return self.gather(x, &r, out);
        };
        let d = shape[axis];
        let mut c = host_ints(k, counts, "repeats")?;
        if c.len() == 1 {
            c = vec![c[0]; d];
        }
        if c.len() != d {
            return Err(
                k.err(format!("repeats has {} counts for a dimension of size {d} (expected 1 or {d})", c.len()))
            );
        }
        if let Some(bad) = c.iter().find(|n| **n < 0) {
            return Err(k.err(format!("repeats must be non-negative, got {bad}")));
        }
        let total = c.iter().try_fold(0usize, |acc, n| acc.checked_add(*n as usize));
        want[axis] = total.unwrap_or(usize::MAX);
        if want != out.shape() {
            return Err(k.err(format!(
                "the repeats add up to {} along axis {axis}, but the result was declared with out_dim {}",
                want[axis],
                out.shape().get(axis).copied().unwrap_or(0)
            )));
        }
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
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
            .map_err(kernel_err)
    }
}

/// A dim attribute as a number (symbolic dims were evaluated by the executor).
pub(super) fn number(k: &Kernel, d: &Dim) -> Result<i64> {
    d.as_static().ok_or_else(|| k.err(format!("indices: the bound {d} is not known at run time")))
}
