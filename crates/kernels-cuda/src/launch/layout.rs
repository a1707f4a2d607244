//! Launch wrappers of kernels/layout.cu: strided copies between two views (with the tiled
//! transpose and 16-byte vector paths chosen here), constant padding and band_part.
//! Shapes and strides are in elements; addresses are device pointers of element 0 of each view.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};

use super::{grid_for, width_suffix};
use crate::sources::LAYOUT;
use crate::{Error, Result, function};

/// Most dims the kernels walk; larger views are split along their leading dim.
pub const MAX_RANK: usize = 8;
const MAX_BATCH: usize = 6;
/// Smallest extent of both tiled dims for which the shared-memory transpose pays off.
const MIN_TILE_EXTENT: usize = 8;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CopyGeo {
    shape: [i64; MAX_RANK],
    src: [i64; MAX_RANK],
    dst: [i64; MAX_RANK],
    rank: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `CopyGeo`.
unsafe impl DeviceRepr for CopyGeo {}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileGeo {
    rows: i64,
    cols: i64,
    src_r: i64,
    src_c: i64,
    dst_r: i64,
    dst_c: i64,
    bshape: [i64; MAX_BATCH],
    bsrc: [i64; MAX_BATCH],
    bdst: [i64; MAX_BATCH],
    brank: i32,
    nbatch: i64,
}
// SAFETY: plain-old-data with the layout of the kernel's `TileGeo`.
unsafe impl DeviceRepr for TileGeo {}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct PadGeo {
    shape: [i64; MAX_RANK],
    lo: [i64; MAX_RANK],
    input: [i64; MAX_RANK],
    src: [i64; MAX_RANK],
    rank: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `PadGeo`.
unsafe impl DeviceRepr for PadGeo {}

/// The kernel-name suffix of the index arithmetic: 32-bit while `n` and a whole grid's stride
/// stay below 2^32 (the loops must not wrap), else 64-bit.
pub(crate) fn index_suffix(n: u64) -> &'static str {
    if n <= i32::MAX as u64 { "i32" } else { "i64" }
}

/// `shape` with the strides of two views, extent-1 dims dropped and neighbours that are
/// contiguous with each other on both sides merged (as few, and as long, dims as possible).
pub fn coalesce2(shape: &[usize], a: &[isize], b: &[isize]) -> (Vec<usize>, Vec<isize>, Vec<isize>) {
    let (mut s, mut sa, mut sb): (Vec<usize>, Vec<isize>, Vec<isize>) = (vec![], vec![], vec![]);
    for ((&d, &x), &y) in shape.iter().zip(a).zip(b) {
        if d == 1 {
            continue;
        }
        match (s.last_mut(), sa.last_mut(), sb.last_mut()) {
            (Some(pd), Some(px), Some(py)) if *px == x * d as isize && *py == y * d as isize => {
                *pd *= d;
                *px = x;
                *py = y;
            }
            _ => {
                s.push(d);
                sa.push(x);
                sb.push(y);
            }
        }
    }
    (s, sa, sb)
}

fn launch_err(what: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
    Error::driver(what)
}

/// One kernel launch of this family, with its arguments: what the wrappers plan before
/// launching (and what the tests check on the host).
#[derive(Clone, Copy)]
pub(crate) enum Launch {
    Copy { elem: usize, src: u64, dst: u64, n: u64, geo: CopyGeo },
    Transpose { elem: usize, src: u64, dst: u64, geo: TileGeo },
    Pad { elem: usize, src: u64, value: u64, dst: u64, n: u64, geo: PadGeo },
}

fn wide_suffix(elem: usize) -> Result<&'static str> {
    if elem == 16 { Ok("b128") } else { width_suffix(elem) }
}

fn launch(stream: &Arc<CudaStream>, plan: &[Launch]) -> Result<()> {
    for l in plan {
        match l {
            Launch::Copy { elem, src, dst, n, geo } => {
                let name = format!("copy_view_{}_{}", wide_suffix(*elem)?, index_suffix(*n));
                let f = function(stream.context(), &LAYOUT, &name)?;
                let mut b = stream.launch_builder(&f);
                b.arg(src).arg(dst).arg(n).arg(geo);
                // SAFETY: copy_view_* takes (const T*, T*, u64, CopyGeo); the views lie inside
                // their allocations (the caller's contract) and widening keeps the same bytes.
                unsafe { b.launch(grid_for(*n)) }.map_err(launch_err("cuLaunchKernel(copy_view)"))?;
            }
            Launch::Transpose { elem, src, dst, geo } => {
                let tiles_c = (geo.cols as u64).div_ceil(32);
                if tiles_c > i32::MAX as u64 {
                    return Err(Error::Unsupported(format!("transpose: a dim of {} elements is too long", geo.cols)));
                }
                let grid = (
                    tiles_c as u32,
                    (geo.rows as u64).div_ceil(32).min(65535) as u32,
                    (geo.nbatch as u64).min(65535) as u32,
                );
                let cfg = LaunchConfig { grid_dim: grid, block_dim: (32, 8, 1), shared_mem_bytes: 0 };
                let f = function(stream.context(), &LAYOUT, &format!("transpose_{}", width_suffix(*elem)?))?;
                let mut b = stream.launch_builder(&f);
                b.arg(src).arg(dst).arg(geo);
                // SAFETY: transpose_* takes (const T*, T*, TileGeo); the tiles are bounds-checked
                // against rows and cols, and the views lie inside their allocations.
                unsafe { b.launch(cfg) }.map_err(launch_err("cuLaunchKernel(transpose)"))?;
            }
            Launch::Pad { elem, src, value, dst, n, geo } => {
                let name = format!("pad_{}_{}", width_suffix(*elem)?, index_suffix(*n));
                let f = function(stream.context(), &LAYOUT, &name)?;
                let mut b = stream.launch_builder(&f);
                b.arg(src).arg(value).arg(dst).arg(n).arg(geo);
                // SAFETY: pad_* takes (const T*, const T*, T*, u64, PadGeo); the source is read
                // only inside the input's box, which lies in its allocation; dst holds n elements.
                unsafe { b.launch(grid_for(*n)) }.map_err(launch_err("cuLaunchKernel(pad)"))?;
            }
        }
    }
    Ok(())
}

/// Copies the view (`shape`, `src_strides`) at `src` into the view (`shape`, `dst_strides`) at
/// `dst`, element by element. Source strides may be negative or 0; the destination view must
/// not reach an element twice, and the two must not overlap. The caller guarantees that every
/// element either view reaches lies inside its allocation.
pub fn copy_view(
    stream: &Arc<CudaStream>,
    src: u64,
    src_strides: &[isize],
    dst: u64,
    dst_strides: &[isize],
    shape: &[usize],
    elem: usize,
) -> Result<()> {
    let mut plan = vec![];
    plan_copy(&mut plan, (src, src_strides), (dst, dst_strides), shape, elem)?;
    launch(stream, &plan)
}

pub(crate) fn plan_copy(
    plan: &mut Vec<Launch>,
    (src, src_strides): (u64, &[isize]),
    (dst, dst_strides): (u64, &[isize]),
    shape: &[usize],
    elem: usize,
) -> Result<()> {
    if shape.len() != src_strides.len() || shape.len() != dst_strides.len() {
        return Err(Error::Unsupported("copy_view: shape and strides differ in length".into()));
    }
    if shape.contains(&0) {
        return Ok(());
    }
    let (shape, sa, sb) = coalesce2(shape, src_strides, dst_strides);
    if shape.len() > MAX_RANK {
        // Split the leading dim: one copy of the rest per index.
        let (e, s0, d0) = (elem as i128, sa[0] as i128, sb[0] as i128);
        for i in 0..shape[0] as i128 {
            let from = (src as i128 + i * s0 * e) as u64;
            let to = (dst as i128 + i * d0 * e) as u64;
            plan_copy(plan, (from, &sa[1..]), (to, &sb[1..]), &shape[1..], elem)?;
        }
        return Ok(());
    }
    if let Some(q) = transposing(&shape, &sa, &sb) {
        plan.push(transpose(src, dst, &shape, &sa, &sb, q, elem));
        return Ok(());
    }
    let (shape, sa, sb, elem) = widen(shape, sa, sb, elem, src, dst);
    let n: u64 = shape.iter().map(|d| *d as u64).product();
    let mut geo = CopyGeo { shape: [1; MAX_RANK], src: [0; MAX_RANK], dst: [0; MAX_RANK], rank: shape.len() as i32 };
    for (i, ((d, x), y)) in shape.iter().zip(&sa).zip(&sb).enumerate() {
        geo.shape[i] = *d as i64;
        geo.src[i] = *x as i64;
        geo.dst[i] = *y as i64;
    }
    plan.push(Launch::Copy { elem, src, dst, n, geo });
    Ok(())
}

/// For a copy whose innermost dim is strided in the source (and contiguous in the
/// destination) while another dim `q` is contiguous in the source: that `q`.
fn transposing(shape: &[usize], sa: &[isize], sb: &[isize]) -> Option<usize> {
    let last = shape.len().checked_sub(1)?;
    if sa[last].abs() == 1 || sb[last] != 1 || shape[last] < MIN_TILE_EXTENT || shape.len() > MAX_BATCH + 2 {
        return None;
    }
    (0..last).rev().find(|&q| sa[q].abs() == 1 && shape[q] >= MIN_TILE_EXTENT)
}

fn transpose(src: u64, dst: u64, shape: &[usize], sa: &[isize], sb: &[isize], q: usize, elem: usize) -> Launch {
    let last = shape.len() - 1;
    let mut geo = TileGeo {
        rows: shape[q] as i64,
        cols: shape[last] as i64,
        src_r: sa[q] as i64,
        src_c: sa[last] as i64,
        dst_r: sb[q] as i64,
        dst_c: sb[last] as i64,
        bshape: [1; MAX_BATCH],
        bsrc: [0; MAX_BATCH],
        bdst: [0; MAX_BATCH],
        brank: 0,
        nbatch: 1,
    };
    for d in (0..last).filter(|&d| d != q) {
        let i = geo.brank as usize;
        geo.bshape[i] = shape[d] as i64;
        geo.bsrc[i] = sa[d] as i64;
        geo.bdst[i] = sb[d] as i64;
        geo.brank += 1;
        geo.nbatch *= shape[d] as i64;
    }
    Launch::Transpose { elem, src, dst, geo }
}

/// Reinterprets a copy whose innermost dim is contiguous on both sides as a copy of wider
/// elements (up to 16 bytes) when the sizes, strides and addresses allow it.
fn widen(
    mut shape: Vec<usize>,
    mut sa: Vec<isize>,
    mut sb: Vec<isize>,
    elem: usize,
    src: u64,
    dst: u64,
) -> (Vec<usize>, Vec<isize>, Vec<isize>, usize) {
    let Some(last) = shape.len().checked_sub(1) else {
        return (shape, sa, sb, elem);
    };
    if sa[last] != 1 || sb[last] != 1 {
        return (shape, sa, sb, elem);
    }
    for w in [16usize, 8, 4, 2] {
        if w <= elem {
            break;
        }
        let ok = (shape[last] * elem).is_multiple_of(w)
            && src.is_multiple_of(w as u64)
            && dst.is_multiple_of(w as u64)
            && sa[..last].iter().chain(&sb[..last]).all(|s| (s.unsigned_abs() * elem).is_multiple_of(w));
        if ok {
            let f = (w / elem) as isize;
            shape[last] /= f as usize;
            for s in sa[..last].iter_mut().chain(sb[..last].iter_mut()) {
                *s /= f;
            }
            return (shape, sa, sb, w);
        }
    }
    (shape, sa, sb, elem)
}

/// Constant padding: the result (`out_shape`, contiguous at `dst`) holds the input view
/// (`in_shape`, `src_strides` at `src`) at offset `lo` per dim, and the element at `value`
/// (device memory) everywhere else.
#[allow(clippy::too_many_arguments)]
pub fn pad(
    stream: &Arc<CudaStream>,
    src: u64,
    src_strides: &[isize],
    in_shape: &[usize],
    value: u64,
    dst: u64,
    out_shape: &[usize],
    lo: &[usize],
    elem: usize,
) -> Result<()> {
    let plan = plan_pad((src, src_strides, in_shape), value, (dst, out_shape), lo, elem)?;
    launch(stream, &plan)
}

pub(crate) fn plan_pad(
    (src, src_strides, in_shape): (u64, &[isize], &[usize]),
    value: u64,
    (dst, out_shape): (u64, &[usize]),
    lo: &[usize],
    elem: usize,
) -> Result<Vec<Launch>> {
    let r = out_shape.len();
    if in_shape.len() != r || src_strides.len() != r || lo.len() != r {
        return Err(Error::Unsupported("pad: shapes, strides and paddings differ in length".into()));
    }
    let mut plan = vec![];
    if out_shape.contains(&0) {
        return Ok(plan);
    }
    // (out, lo, in, stride) per dim; unpadded extent-1 dims dropped, and a dim merged into the
    // one before it when it is unpadded and contiguous with it in the source.
    let mut dims: Vec<(usize, usize, usize, isize)> = Vec::with_capacity(r);
    for i in 0..r {
        let (o, l, n, s) = (out_shape[i], lo[i], in_shape[i], src_strides[i]);
        if o == 1 && n == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(p) if l == 0 && n == o && p.3 == s * n as isize => *p = (p.0 * o, p.1 * o, p.2 * n, s),
            _ => dims.push((o, l, n, s)),
        }
    }
    pad_dims(&mut plan, src, &dims, value, dst, elem, false);
    Ok(plan)
}

fn pad_dims(
    plan: &mut Vec<Launch>,
    src: u64,
    dims: &[(usize, usize, usize, isize)],
    value: u64,
    dst: u64,
    elem: usize,
    outside: bool,
) {
    if dims.len() > MAX_RANK {
        // Split the leading dim: rows inside the input recurse on its rows, the others are all
        // padding (an input extent of 0 puts every element outside).
        let (o, l, n, s) = dims[0];
        let row: u64 = dims[1..].iter().map(|d| d.0 as u64).product::<u64>() * elem as u64;
        for i in 0..o {
            let inside = !outside && i >= l && i < l + n;
            let from = if inside { (src as i128 + (i - l) as i128 * s as i128 * elem as i128) as u64 } else { src };
            pad_dims(plan, from, &dims[1..], value, dst + i as u64 * row, elem, !inside);
        }
        return;
    }
    let mut geo = PadGeo { shape: [1; MAX_RANK], lo: [0; MAX_RANK], input: [1; MAX_RANK], src: [0; MAX_RANK], rank: 0 };
    for (i, &(o, l, n, s)) in dims.iter().enumerate() {
        geo.shape[i] = o as i64;
        geo.lo[i] = l as i64;
        geo.input[i] = n as i64;
        geo.src[i] = s as i64;
    }
    geo.rank = dims.len() as i32;
    if outside {
        // Everything is padding: one dim (a dummy one at rank 0) with an empty input.
        geo.input[0] = 0;
        geo.rank = geo.rank.max(1);
    }
    let n: u64 = dims.iter().map(|d| d.0 as u64).product();
    plan.push(Launch::Pad { elem, src, value, dst, n, geo });
}

/// band_part of contiguous `[.., rows, cols]` matrices: `n` elements from `src` to `dst`, those
/// outside the band (inside with `exclude`) zeroed. `lower`/`upper` < 0: the whole triangle.
#[allow(clippy::too_many_arguments)]
pub fn band_part(
    stream: &Arc<CudaStream>,
    src: u64,
    dst: u64,
    n: u64,
    (rows, cols): (usize, usize),
    (lower, upper): (i64, i64),
    exclude: bool,
    elem: usize,
) -> Result<()> {
    if n == 0 || rows == 0 || cols == 0 {
        return Ok(());
    }
    let f = function(stream.context(), &LAYOUT, &format!("band_part_{}_{}", width_suffix(elem)?, index_suffix(n)))?;
    let (rows, cols, exclude) = (rows as i64, cols as i64, exclude as i32);
    let mut launch = stream.launch_builder(&f);
    launch.arg(&src).arg(&dst).arg(&n).arg(&rows).arg(&cols).arg(&lower).arg(&upper).arg(&exclude);
    // SAFETY: band_part_* takes (const T*, T*, u64, i64, i64, i64, i64, int); both buffers hold
    // n contiguous elements (the caller's contract).
    unsafe { launch.launch(grid_for(n)) }.map_err(launch_err("cuLaunchKernel(band_part)"))?;
    Ok(())
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
