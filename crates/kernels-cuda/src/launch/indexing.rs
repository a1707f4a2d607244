//! Launch wrappers of kernels/indexing.cu: index resolution (with the device error flag),
//! row gathers, and the two-phase deterministic scatters. Addresses are device pointers;
//! sizes are in elements unless named otherwise.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, PushKernelArg};
use max_graph::DType;

use super::layout::index_suffix;
use super::{grid_for, width_suffix};
use crate::sources::INDEXING;
use crate::{Error, Result, function};

/// Most components an index vector may have (and most dims of a scatter's updates).
pub const MAX_RANK: usize = 8;

#[repr(C)]
#[derive(Clone, Copy)]
struct ResolveGeo {
    dims: [i64; MAX_RANK],
    k: i32,
    per_batch: i64,
    slices: i64,
}
// SAFETY: plain-old-data with the layout of the kernel's `ResolveGeo`.
unsafe impl DeviceRepr for ResolveGeo {}

#[repr(C)]
#[derive(Clone, Copy)]
struct ScatterGeo {
    ushape: [i64; MAX_RANK],
    ostride: [i64; MAX_RANK],
    rank: i32,
    axis: i32,
    size: i64,
}
// SAFETY: plain-old-data with the layout of the kernel's `ScatterGeo`.
unsafe impl DeviceRepr for ScatterGeo {}

fn index_name(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Int8 => "i8",
        DType::Int16 => "i16",
        DType::Int32 => "i32",
        DType::Int64 => "i64",
        DType::UInt8 => "u8",
        DType::UInt16 => "u16",
        DType::UInt32 => "u32",
        DType::UInt64 => "u64",
        _ => return None,
    })
}

/// Whether `resolve` takes indices of this dtype.
pub fn is_index_dtype(dtype: DType) -> bool {
    index_name(dtype).is_some()
}

/// Resolves `nvec` index vectors of `dims.len()` components each (contiguous at `raw`, of
/// `dtype`) into row numbers at `rows` (i64): vector v's row is `(v / per_batch) * slices +`
/// its row-major position in `dims`. A component outside `-dim..dim` makes the row 0 and
/// lowers the u64 at `err` (which the caller set to u64::MAX) to that component's position.
#[allow(clippy::too_many_arguments)]
pub fn resolve(
    stream: &Arc<CudaStream>,
    raw: u64,
    dtype: DType,
    rows: u64,
    nvec: u64,
    dims: &[usize],
    (per_batch, slices): (usize, usize),
    err: u64,
) -> Result<()> {
    let Some(name) = index_name(dtype) else {
        return Err(Error::Unsupported(format!("indices of dtype {dtype} are not supported on the GPU")));
    };
    if dims.len() > MAX_RANK || dims.is_empty() {
        return Err(Error::Unsupported(format!("index vectors of {} components are not supported", dims.len())));
    }
    if nvec == 0 {
        return Ok(());
    }
    let mut g = ResolveGeo {
        dims: [0; MAX_RANK],
        k: dims.len() as i32,
        per_batch: per_batch.max(1) as i64,
        slices: slices as i64,
    };
    for (i, d) in dims.iter().enumerate() {
        g.dims[i] = *d as i64;
    }
    let f = function(stream.context(), &INDEXING, &format!("resolve_{name}"))?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&raw).arg(&rows).arg(&nvec).arg(&g).arg(&err);
    // SAFETY: resolve_* takes (const I*, i64*, u64, ResolveGeo, u64*); raw holds nvec * k
    // indices, rows nvec entries, err one u64 (the caller's contract).
    unsafe { launch.launch(grid_for(nvec)) }.map_err(Error::driver("cuLaunchKernel(resolve)"))?;
    Ok(())
}

/// The widest element (up to 16 bytes) that rows of `row` elements of `elem` bytes, at
/// addresses `ptrs`, can be moved as; with the row length in those elements.
fn wide(row: usize, elem: usize, ptrs: &[u64]) -> (usize, usize) {
    for w in [16usize, 8, 4, 2] {
        if w <= elem {
            break;
        }
        if (row * elem).is_multiple_of(w) && ptrs.iter().all(|p| p % w as u64 == 0) {
            return (row * elem / w, w);
        }
    }
    (row, elem)
}

fn wide_suffix(elem: usize) -> Result<&'static str> {
    if elem == 16 { Ok("b128") } else { width_suffix(elem) }
}

/// `dst[o, j, :] = src[o * src_rows + rows[j], :]` for o < outer, j < n, with rows of `row`
/// elements of `elem` bytes; `rows` holds n i64 row numbers, each < src_rows (or, with outer 1,
/// inside the source).
#[allow(clippy::too_many_arguments)]
pub fn gather_rows(
    stream: &Arc<CudaStream>,
    src: u64,
    dst: u64,
    rows: u64,
    (outer, n, src_rows): (usize, usize, usize),
    row: usize,
    elem: usize,
) -> Result<()> {
    let (row, elem) = wide(row, elem, &[src, dst]);
    let total = outer as u64 * n as u64 * row as u64;
    if total == 0 {
        return Ok(());
    }
    let name = format!("gather_rows_{}_{}", wide_suffix(elem)?, index_suffix(total));
    let f = function(stream.context(), &INDEXING, &name)?;
    let (n, src_rows, row) = (n as u64, src_rows as u64, row as u64);
    let mut launch = stream.launch_builder(&f);
    launch.arg(&src).arg(&dst).arg(&rows).arg(&total).arg(&n).arg(&src_rows).arg(&row);
    // SAFETY: gather_rows_* takes (const T*, T*, const i64*, u64, u64, u64, u64); the rows
    // address rows inside src and dst holds outer * n rows (the caller's contract).
    unsafe { launch.launch(grid_for(total)) }.map_err(Error::driver("cuLaunchKernel(gather_rows)"))?;
    Ok(())
}

/// The index dtypes [`gather_index`] takes.
pub fn gather_index_takes(dtype: DType) -> bool {
    gather_index_name(dtype).is_some()
}

fn gather_index_name(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Int32 => "i32",
        DType::Int64 => "i64",
        DType::UInt32 => "u32",
        DType::UInt64 => "u64",
        _ => return None,
    })
}

/// [`resolve`] of one component of extent `src_rows` and [`gather_rows`] in one launch
/// (`gather_idx_*`): `dst[o, j, :] = src[o * src_rows + row(raw[j]), :]` for n indices of
/// `dtype` at `raw`, a bad one making its row 0 and lowering the u64 at `err` (set to u64::MAX
/// by the caller) to its position. Ok(false), nothing launched, for index dtypes it does not
/// take (those other than i32, i64, u32 and u64).
#[allow(clippy::too_many_arguments)]
pub fn gather_index(
    stream: &Arc<CudaStream>,
    (src, dst, raw): (u64, u64, u64),
    dtype: DType,
    (outer, n, src_rows): (usize, usize, usize),
    row: usize,
    elem: usize,
    err: u64,
) -> Result<bool> {
    let Some(idx) = gather_index_name(dtype) else { return Ok(false) };
    let (row, elem) = wide(row, elem, &[src, dst]);
    let total = outer as u64 * n as u64 * row as u64;
    if total == 0 {
        return Ok(true);
    }
    let name = format!("gather_idx_{}_{idx}_{}", wide_suffix(elem)?, index_suffix(total));
    let f = function(stream.context(), &INDEXING, &name)?;
    let (n, src_rows, row) = (n as u64, src_rows as u64, row as u64);
    let mut launch = stream.launch_builder(&f);
    launch.arg(&src).arg(&dst).arg(&raw).arg(&total).arg(&n).arg(&src_rows).arg(&row).arg(&err);
    // SAFETY: gather_idx_* takes (const T*, T*, const I*, u64, u64, u64, u64, u64*); raw holds
    // n indices of the kernel's type, src outer * src_rows rows and dst outer * n rows of `row`
    // elements, err one u64 (the caller's contract); out-of-range indices read row 0.
    unsafe { launch.launch(grid_for(total)) }.map_err(Error::driver("cuLaunchKernel(gather_idx)"))?;
    Ok(true)
}

/// scatter's geometry: the updates' shape, the output's row-major strides, the axis and the
/// output's extent along it.
fn scatter_geo(ushape: &[usize], out_shape: &[usize], axis: usize) -> Result<ScatterGeo> {
    if ushape.len() > MAX_RANK || ushape.len() != out_shape.len() || axis >= ushape.len() {
        return Err(Error::Unsupported(format!("scatter of rank {} is not supported on the GPU", ushape.len())));
    }
    let mut g = ScatterGeo {
        ushape: [1; MAX_RANK],
        ostride: [0; MAX_RANK],
        rank: ushape.len() as i32,
        axis: axis as i32,
        size: out_shape[axis] as i64,
    };
    let mut acc = 1i64;
    for d in (0..ushape.len()).rev() {
        g.ushape[d] = ushape[d] as i64;
        g.ostride[d] = acc;
        acc *= out_shape[d] as i64;
    }
    Ok(g)
}

/// Phase 1 of scatter with possible duplicates: every update claims its target in `winner`
/// (u32, zeroed by the caller, one entry per (coordinate off the axis, target index)).
pub fn scatter_claim(
    stream: &Arc<CudaStream>,
    rows: u64,
    winner: u64,
    ushape: &[usize],
    out_shape: &[usize],
    axis: usize,
) -> Result<()> {
    let g = scatter_geo(ushape, out_shape, axis)?;
    let n: u64 = ushape.iter().map(|d| *d as u64).product();
    if n == 0 {
        return Ok(());
    }
    let f = function(stream.context(), &INDEXING, "scatter_claim")?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&rows).arg(&winner).arg(&n).arg(&g);
    // SAFETY: scatter_claim takes (const i64*, u32*, u64, ScatterGeo); rows holds n resolved
    // indices < size and winner (n / ushape[axis]) * size entries (the caller's contract).
    unsafe { launch.launch(grid_for(n)) }.map_err(Error::driver("cuLaunchKernel(scatter_claim)"))?;
    Ok(())
}

/// Phase 2 of scatter: update u goes to its target when it won it (`winner` 0: no claims,
/// every update writes; the caller guarantees no duplicates then).
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    stream: &Arc<CudaStream>,
    updates: u64,
    out: u64,
    rows: u64,
    winner: u64,
    ushape: &[usize],
    out_shape: &[usize],
    axis: usize,
    elem: usize,
) -> Result<()> {
    let g = scatter_geo(ushape, out_shape, axis)?;
    let n: u64 = ushape.iter().map(|d| *d as u64).product();
    if n == 0 {
        return Ok(());
    }
    let f = function(stream.context(), &INDEXING, &format!("scatter_{}", width_suffix(elem)?))?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&updates).arg(&out).arg(&rows).arg(&winner).arg(&n).arg(&g);
    // SAFETY: scatter_* takes (const T*, T*, const i64*, const u32*, u64, ScatterGeo); targets
    // lie inside the output (resolved indices, updates no larger than it off the axis).
    unsafe { launch.launch(grid_for(n)) }.map_err(Error::driver("cuLaunchKernel(scatter)"))?;
    Ok(())
}

/// Phase 1 of scatter_nd with several index vectors: vector v claims row rows[v] in `winner`
/// (u32, zeroed by the caller, one entry per output row).
pub fn scatter_nd_claim(stream: &Arc<CudaStream>, rows: u64, winner: u64, nvec: usize) -> Result<()> {
    let n = nvec as u64;
    if n == 0 {
        return Ok(());
    }
    let f = function(stream.context(), &INDEXING, "scatter_nd_claim")?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&rows).arg(&winner).arg(&n);
    // SAFETY: scatter_nd_claim takes (const i64*, u32*, u64); every row is an output row.
    unsafe { launch.launch(grid_for(n)) }.map_err(Error::driver("cuLaunchKernel(scatter_nd_claim)"))?;
    Ok(())
}

/// Phase 2 of scatter_nd: row v of `updates` (rows of `row` elements) replaces output row
/// rows[v] when v won it (`winner` 0: every vector writes).
#[allow(clippy::too_many_arguments)]
pub fn scatter_rows(
    stream: &Arc<CudaStream>,
    updates: u64,
    out: u64,
    rows: u64,
    winner: u64,
    nvec: usize,
    row: usize,
    elem: usize,
) -> Result<()> {
    let (row, elem) = wide(row, elem, &[updates, out]);
    let total = nvec as u64 * row as u64;
    if total == 0 {
        return Ok(());
    }
    let name = format!("scatter_rows_{}_{}", wide_suffix(elem)?, index_suffix(total));
    let f = function(stream.context(), &INDEXING, &name)?;
    let row = row as u64;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&updates).arg(&out).arg(&rows).arg(&winner).arg(&total).arg(&row);
    // SAFETY: scatter_rows_* takes (const T*, T*, const i64*, const u32*, u64, u64); every
    // row number addresses a row of the output (the caller's contract).
    unsafe { launch.launch(grid_for(total)) }.map_err(Error::driver("cuLaunchKernel(scatter_rows)"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The kernels' index arithmetic emulated on the host (same geometry structs, same
    //! formulas) against naive sequential references.
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// scatter_target of kernels/indexing.cu.
    fn target(u: u64, t: i64, g: &ScatterGeo) -> (i64, i64) {
        let (mut rest, mut kmul, mut key, mut off) = (u, 1i64, 0i64, 0i64);
        for d in (0..g.rank as usize).rev() {
            let e = g.ushape[d] as u64;
            let c = (rest % e) as i64;
            rest /= e;
            if d == g.axis as usize {
                off += t * g.ostride[d];
            } else {
                off += c * g.ostride[d];
                key += c * kmul;
                kmul *= g.ushape[d];
            }
        }
        (key * g.size + t, off)
    }

    #[test]
    #[allow(clippy::needless_range_loop)]
    fn two_phase_scatter_matches_sequential_writes() {
        let mut rng = Rng(0xDEADBEEF);
        for _ in 0..500 {
            let rank = 1 + rng.below(4);
            let shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(5)).collect();
            let axis = rng.below(rank);
            let ushape: Vec<usize> =
                (0..rank).map(|d| if d == axis { 1 + rng.below(8) } else { 1 + rng.below(shape[d]) }).collect();
            let n: usize = ushape.iter().product();
            let idx: Vec<i64> = (0..n).map(|_| rng.below(shape[axis]) as i64).collect();
            let g = scatter_geo(&ushape, &shape, axis).unwrap();
            let total: usize = shape.iter().product();
            // Phase 1 and 2 as the kernels do them (the order of claims does not matter).
            let mut winner = vec![0u32; n / ushape[axis] * shape[axis]];
            for u in (0..n).rev() {
                let (key, _) = target(u as u64, idx[u], &g);
                winner[key as usize] = winner[key as usize].max(u as u32 + 1);
            }
            let mut got = vec![-1i64; total];
            for u in 0..n {
                let (key, off) = target(u as u64, idx[u], &g);
                if winner[key as usize] == u as u32 + 1 {
                    assert_eq!(got[off as usize], -1, "two winners for one place");
                    got[off as usize] = u as i64;
                }
            }
            // Sequential reference: row-major over the updates, later writes win.
            let mut want = vec![-1i64; total];
            for u in 0..n {
                let (mut rest, mut off, mut stride) = (u, 0usize, 1usize);
                let mut c = vec![0usize; rank];
                for d in (0..rank).rev() {
                    c[d] = rest % ushape[d];
                    rest /= ushape[d];
                }
                c[axis] = idx[u] as usize;
                for d in (0..rank).rev() {
                    off += c[d] * stride;
                    stride *= shape[d];
                }
                want[off] = u as i64;
            }
            assert_eq!(got, want, "shape {shape:?} updates {ushape:?} axis {axis}");
        }
    }

    #[test]
    fn resolved_rows_address_gather_nd_slices() {
        let mut rng = Rng(0xC0FFEE);
        for _ in 0..300 {
            let batch = rng.below(3);
            let k = 1 + rng.below(3);
            let rest = rng.below(3);
            let shape: Vec<usize> = (0..batch + k + rest).map(|_| 1 + rng.below(4)).collect();
            let per_batch = 1 + rng.below(5);
            let nbatch: usize = shape[..batch].iter().product();
            let sdims = &shape[batch..batch + k];
            let slices: usize = sdims.iter().product();
            let row: usize = shape[batch + k..].iter().product();
            let nvec = nbatch * per_batch;
            let raw: Vec<i64> =
                (0..nvec * k).map(|i| rng.below(2 * sdims[i % k]) as i64 - sdims[i % k] as i64).collect();
            // resolve, as the kernel computes it
            let rows: Vec<i64> = (0..nvec)
                .map(|v| {
                    let mut lin = 0i64;
                    for t in 0..k {
                        let (d, x) = (sdims[t] as i64, raw[v * k + t]);
                        lin = lin * d + if x < 0 { x + d } else { x };
                    }
                    (v / per_batch) as i64 * slices as i64 + lin
                })
                .collect();
            // gather_rows with outer 1: element (v, r) comes from rows[v] * row + r.
            let strides = {
                let mut s = vec![1usize; shape.len()];
                for d in (0..shape.len().saturating_sub(1)).rev() {
                    s[d] = s[d + 1] * shape[d + 1];
                }
                s
            };
            for v in 0..nvec {
                let b = v / per_batch;
                let mut coords = vec![0usize; batch];
                let mut rest = b;
                for d in (0..batch).rev() {
                    coords[d] = rest % shape[d];
                    rest /= shape[d];
                }
                for t in 0..k {
                    let x = raw[v * k + t];
                    coords.push(if x < 0 { (x + sdims[t] as i64) as usize } else { x as usize });
                }
                let first: usize = coords.iter().zip(&strides).map(|(c, s)| c * s).sum();
                assert_eq!(rows[v] as usize * row, first, "shape {shape:?} batch {batch} k {k}");
            }
        }
        // Row widening: 16-byte rows when sizes and addresses allow, else narrower.
        assert_eq!(wide(1024, 2, &[0, 4096]), (128, 16));
        assert_eq!(wide(6, 2, &[0, 4]), (3, 4));
        assert_eq!(wide(3, 4, &[0, 16]), (3, 4));
        assert_eq!(wide(8, 1, &[1, 16]), (8, 1));
    }
}
