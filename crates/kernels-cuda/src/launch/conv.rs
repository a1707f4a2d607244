//! The conv family (kernels/conv.cu, kernels/pool.cu): conv2d/conv3d as im2col + GEMM (direct
//! kernels for depthwise convolutions and non-float dtypes), conv2d_transpose as GEMM + col2im,
//! pooling and fold. Also the stream-ordered scratch buffer and the GEMM dispatch (Hopper wgmma
//! kernel for large 16-bit problems, the mma.sync/SIMT kernels otherwise) that the quant family
//! uses too.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, result};
use max_graph::DType;

use super::epilogue::Epilogue;
use super::{cast_name, gemm_sm90};
use crate::sources::{CONV, POOL};
use crate::{Error, Result, function};

const BLOCK: u32 = 256;
const MAX_BLOCKS: u64 = 1 << 16;
/// Scratch (im2col blocks, GEMM results) stays about this size; larger problems run in chunks.
pub const SCRATCH_BUDGET: usize = 256 << 20;
/// Most rows one SIMT GEMM launch takes (gridDim.y of 16-row tiles is at most 65535).
pub const GEMM_MAX_ROWS: usize = 65535 * 16;

pub(crate) fn grid(n: u64) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as u64).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}

/// A grid with one warp per item (`items` rows).
fn warp_grid(items: u64) -> LaunchConfig {
    grid(items.saturating_mul(32))
}

/// The 2-D grid of the kernels' IMAGE_LOOP: `per` elements of each of `images` images along x
/// (blocks no wider than needed), images along y; grid-stride loops cover the rest.
fn image_grid(per: i64, images: i64) -> LaunchConfig {
    let threads = (per.max(1) as u32).next_multiple_of(32).min(BLOCK);
    let bx = (per.max(1) as u64).div_ceil(threads as u64).min(MAX_BLOCKS) as u32;
    let by = images.clamp(1, 65535) as u32;
    LaunchConfig { grid_dim: (bx, by, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

/// The kernels count images and the elements of one image with 32-bit loop counters and do the
/// coordinates within an image in 32 bits: every such extent must stay below this.
const INT_LIMIT: i64 = 1 << 30;

fn fits(what: &str, values: &[i64]) -> Result<()> {
    if values.iter().all(|&v| (0..INT_LIMIT).contains(&v)) {
        return Ok(());
    }
    Err(Error::Unsupported(format!(
        "{what}: extents of 2^30 or more (per image, or in the number of images) are not supported on the GPU"
    )))
}

/// Products of extents, saturating (so that an overflow fails `fits`).
fn prod(values: &[i64]) -> i64 {
    values.iter().fold(1i64, |a, &b| a.saturating_mul(b))
}

/// A device allocation ordered on a stream: allocated with cuMemAllocAsync, freed with
/// cuMemFreeAsync on the same stream when dropped (after every kernel queued before the drop).
pub struct Scratch {
    ptr: u64,
    stream: Arc<CudaStream>,
}

impl Scratch {
    pub fn new(stream: &Arc<CudaStream>, bytes: usize) -> Result<Scratch> {
        // SAFETY: stream-ordered allocation on a live stream; freed in Drop on the same stream.
        let ptr = unsafe { result::malloc_async(stream.cu_stream(), bytes.max(256)) }
            .map_err(Error::driver("cuMemAllocAsync"))?;
        Ok(Scratch { ptr, stream: stream.clone() })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_async on this stream; kernels using it were queued on the
        // same stream before this point, so the free is ordered after them.
        let _ = unsafe { result::free_async(self.ptr, self.stream.cu_stream()) };
    }
}

/// Whether the GEMM kernels take this dtype.
pub fn gemm_dtype(dtype: DType) -> bool {
    matches!(dtype, DType::BFloat16 | DType::Float16 | DType::Float32 | DType::Float64)
}

/// Padding multiple of GEMM dimensions: tensor cores need K and N multiples of 8 for 16-bit types.
fn gemm_align(dtype: DType) -> usize {
    if matches!(dtype, DType::BFloat16 | DType::Float16) { 8 } else { 1 }
}

/// `batch` products C[b] = A[b] @ B[b] of row-major A [m, k], B [k, n], C [m, n] stored back to
/// back. One batch may have any number of rows; with batch > 1, m must be at most
/// GEMM_MAX_ROWS.
pub fn gemm(
    stream: &Arc<CudaStream>,
    dtype: DType,
    hopper: bool,
    abc: (u64, u64, u64),
    mnk: (usize, usize, usize),
    batch: usize,
) -> Result<()> {
    gemm_epi(stream, dtype, hopper, abc, mnk, batch, &Epilogue::default())
}

/// `gemm` with a fused epilogue (its residual laid out like C, batches back to back).
#[allow(clippy::too_many_arguments)]
pub fn gemm_epi(
    stream: &Arc<CudaStream>,
    dtype: DType,
    hopper: bool,
    (a, b, c): (u64, u64, u64),
    (m, n, k): (usize, usize, usize),
    batch: usize,
    epi: &Epilogue,
) -> Result<()> {
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    let es = dtype.size_in_bytes() as u64;
    // The residual moves with C.
    let shifted = |bytes: u64| {
        let mut e = *epi;
        if e.residual != 0 {
            e.residual += bytes;
        }
        e
    };
    if batch == 1 && m > GEMM_MAX_ROWS {
        for r0 in (0..m).step_by(GEMM_MAX_ROWS) {
            let rows = (m - r0).min(GEMM_MAX_ROWS);
            let (ao, co) = ((r0 * k) as u64 * es, (r0 * n) as u64 * es);
            gemm_epi(stream, dtype, hopper, (a + ao, b, c + co), (rows, n, k), 1, &shifted(co))?;
        }
        return Ok(());
    }
    if m > GEMM_MAX_ROWS {
        return Err(Error::Unsupported(format!("batched GEMM of {m} rows")));
    }
    // gridDim.z is at most 65535.
    for z0 in (0..batch).step_by(65535) {
        let nb = (batch - z0).min(65535);
        let off = |per: usize| (z0 * per) as u64 * es;
        let (a, b, c) = (a + off(m * k), b + off(k * n), c + off(m * n));
        let e = shifted(off(m * n));
        if hopper && gemm_sm90::suitable(dtype, m, n, k, a, b) {
            match gemm_sm90::gemm(stream, dtype, (a, b, c), (m, n, k), nb, (nb, nb), &e) {
                Ok(()) => continue,
                Err(Error::Unsupported(_)) => {}
                Err(e) => return Err(e),
            }
        }
        super::matmul(stream, dtype, (a, b, c), (m, n, k), nb, (m * k, k * n, m * n), &e)?;
    }
    Ok(())
}

/// The geometry of conv2d/conv3d (a 2-D one has depth 1: index 0 of every spatial triple).
/// The caller fills everything but `kg`, `kp`, `np` and `has_bias`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvGeo {
    pub n: i64,
    pub c: i64,
    pub f: i64,
    pub groups: i64,
    pub cg: i64,
    pub fg: i64,
    pub input: [i64; 3],
    pub output: [i64; 3],
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    pub dil: [i64; 3],
    /// Padding before each spatial dim.
    pub pad: [i64; 3],
    /// Element strides of x: batch, channel, spatial dims.
    pub xs_n: i64,
    pub xs_c: i64,
    pub xs: [i64; 3],
    /// Element strides of the filter: kernel dims, input channel, output channel.
    pub ftap: [i64; 3],
    pub fc: i64,
    pub ff: i64,
    pub kg: i64,
    pub kp: i64,
    pub np: i64,
    pub has_bias: i64,
}
// SAFETY: plain-old-data with the layout of the kernels' `ConvGeo`.
unsafe impl DeviceRepr for ConvGeo {}

/// conv2d_transpose geometry; `pad` is (top, left). The caller fills all but `kp`, `np`,
/// `has_bias`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvTGeo {
    pub n: i64,
    pub cin: i64,
    pub f: i64,
    pub input: [i64; 2],
    pub output: [i64; 2],
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub dil: [i64; 2],
    pub pad: [i64; 2],
    pub xs_n: i64,
    pub xs_c: i64,
    pub xs: [i64; 2],
    pub ftap: [i64; 2],
    pub fin: i64,
    pub fout: i64,
    pub kp: i64,
    pub np: i64,
    pub channels_last: i64,
    pub has_bias: i64,
}
// SAFETY: plain-old-data with the layout of the kernels' `ConvTGeo`.
unsafe impl DeviceRepr for ConvTGeo {}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Band {
    img0: i64,
    nimg: i64,
    oy0: i64,
    oy1: i64,
    h_lo: i64,
    h_hi: i64,
}
// SAFETY: plain-old-data with the layout of the kernels' `Band`.
unsafe impl DeviceRepr for Band {}

fn suffix(dtype: DType) -> Result<&'static str> {
    cast_name(dtype).ok_or_else(|| Error::Unsupported(format!("convolution of {dtype} is not supported on the GPU")))
}

/// conv2d / conv3d into the channels-last output `out` ([N, spatial..., F]). `x`, `w`, `bias`
/// (0 when absent) and `out` are device addresses of contiguous tensors of `dtype`.
pub fn conv_forward(
    stream: &Arc<CudaStream>,
    dtype: DType,
    hopper: bool,
    ptrs: (u64, u64, u64, u64),
    g: ConvGeo,
) -> Result<()> {
    conv_forward_epi(stream, dtype, hopper, ptrs, g, &Epilogue::default()).map(|_| ())
}

/// `conv_forward` whose GEMM also applies `epi` (its bias indexed by output channel, its
/// residual shaped like `out`), when the GEMM writes `out` itself: one group, F needing no
/// padding, a GEMM dtype. Otherwise (and for a non-identity `epi`) it launches nothing and
/// returns false: the caller runs the plain convolution and applies the epilogue after.
pub fn conv_forward_epi(
    stream: &Arc<CudaStream>,
    dtype: DType,
    hopper: bool,
    (x, w, bias, out): (u64, u64, u64, u64),
    mut g: ConvGeo,
    epi: &Epilogue,
) -> Result<bool> {
    let positions = (g.output.iter().product::<i64>()) as usize;
    let (total_rows, f) = (g.n as usize * positions, g.f as usize);
    if total_rows == 0 || f == 0 {
        return Ok(true);
    }
    let sfx = suffix(dtype)?;
    g.has_bias = (bias != 0) as i64;
    g.kg = prod(&g.kernel).saturating_mul(g.cg);
    let mut extents = vec![g.n, prod(&[positions as i64, g.f]), g.kg + 1];
    for i in 0..3 {
        extents.push(g.input[i].saturating_add(g.pad[i]));
        extents.push(prod(&[g.output[i], g.stride[i]]).saturating_add(prod(&[g.kernel[i], g.dil[i]])));
    }
    fits("convolution", &extents)?;
    let depthwise = g.cg == 1 && g.groups > 1;
    let gemm_path = gemm_dtype(dtype) && !depthwise && g.kg != 0;
    if !(epi.is_identity() || gemm_path && epilogue_fits(dtype, &g)) {
        return Ok(false);
    }
    if !gemm_path {
        let func = function(stream.context(), &CONV, &format!("conv_direct_{sfx}"))?;
        let mut l = stream.launch_builder(&func);
        l.arg(&x).arg(&w).arg(&bias).arg(&out).arg(&g);
        // SAFETY: the tensors hold what the geometry describes (the caller's contract).
        unsafe { l.launch(image_grid((positions * f) as i64, g.n)) }
            .map_err(Error::driver("cuLaunchKernel(conv_direct)"))?;
        return Ok(true);
    }
    let align = gemm_align(dtype);
    let (groups, kg, fg) = (g.groups as usize, g.kg as usize, g.fg as usize);
    let kp = (kg + g.has_bias as usize).next_multiple_of(align);
    let np = fg.next_multiple_of(align);
    fits("convolution", &[prod(&[groups as i64, kp as i64, np as i64])])?;
    (g.kp, g.np) = (kp as i64, np as i64);
    let es = dtype.size_in_bytes();
    // The GEMM writes the output itself when it has one group and F needs no padding; a 1x1
    // stride-1 unpadded convolution of channels-last x multiplies x itself.
    let direct_out = groups == 1 && np == f;
    debug_assert!(direct_out || epi.is_identity());
    let one_by_one = groups == 1
        && kp == kg
        && g.kernel == [1; 3]
        && g.stride == [1; 3]
        && g.pad == [0; 3]
        && g.xs_c == 1
        && g.xs[2] == g.c
        && g.output == g.input;
    let wm = Scratch::new(stream, groups * kp * np * es)?;
    {
        let func = function(stream.context(), &CONV, &format!("conv_weights_{sfx}"))?;
        let mut l = stream.launch_builder(&func);
        let wp = wm.ptr();
        l.arg(&w).arg(&bias).arg(&wp).arg(&g);
        // SAFETY: wm holds groups * kp * np elements; the filter and bias hold what g describes.
        unsafe { l.launch(image_grid((groups * kp * np) as i64, 1)) }
            .map_err(Error::driver("cuLaunchKernel(conv_weights)"))?;
    }
    let per_row = groups * es * (if one_by_one { 0 } else { kp } + if direct_out { 0 } else { np });
    let chunk = (SCRATCH_BUDGET / per_row.max(1)).clamp(1, GEMM_MAX_ROWS).min(total_rows);
    let col = if one_by_one { None } else { Some(Scratch::new(stream, groups * chunk * kp * es)?) };
    let cbuf = if direct_out { None } else { Some(Scratch::new(stream, groups * chunk * np * es)?) };
    let im2col = function(stream.context(), &CONV, &format!("conv_im2col_{sfx}"))?;
    let scatter = function(stream.context(), &CONV, &format!("conv_scatter_{sfx}"))?;
    for p0 in (0..total_rows).step_by(chunk) {
        let rows = (total_rows - p0).min(chunk);
        let a = match &col {
            None => x + (p0 * kp * es) as u64,
            Some(col) => {
                let (cp, p0i, rowsi) = (col.ptr(), p0 as i64, rows as i64);
                let mut l = stream.launch_builder(&im2col);
                l.arg(&x).arg(&cp).arg(&g).arg(&p0i).arg(&rowsi);
                // SAFETY: col holds groups * chunk * kp elements; x what g describes.
                unsafe { l.launch(warp_grid((groups * rows) as u64)) }
                    .map_err(Error::driver("cuLaunchKernel(conv_im2col)"))?;
                cp
            }
        };
        let dst = match &cbuf {
            None => out + (p0 * f * es) as u64,
            Some(b) => b.ptr(),
        };
        if cbuf.is_none() {
            // The GEMM writes rows p0.. of out: its residual starts there too.
            let mut e = *epi;
            if e.residual != 0 {
                e.residual += (p0 * f * es) as u64;
            }
            gemm_epi(stream, dtype, hopper, (a, wm.ptr(), dst), (rows, np, kp), groups, &e)?;
        } else {
            gemm(stream, dtype, hopper, (a, wm.ptr(), dst), (rows, np, kp), groups)?;
        }
        if let Some(b) = &cbuf {
            let (bp, o, rowsi) = (b.ptr(), out + (p0 * f * es) as u64, rows as i64);
            let mut l = stream.launch_builder(&scatter);
            l.arg(&bp).arg(&o).arg(&g).arg(&rowsi);
            // SAFETY: cbuf holds groups * rows * np elements, out rows * f from p0 on.
            unsafe { l.launch(image_grid(f as i64, rows as i64)) }
                .map_err(Error::driver("cuLaunchKernel(conv_scatter)"))?;
        }
    }
    Ok(true)
}

/// Whether the GEMM of a conv on the GEMM path writes the output itself (one group, F a
/// multiple of the GEMM's alignment), so that it can apply a fused epilogue.
fn epilogue_fits(dtype: DType, g: &ConvGeo) -> bool {
    g.groups == 1 && (g.fg as usize).is_multiple_of(gemm_align(dtype))
}

/// conv2d_transpose into `out` (channels-last or channels-first as `g.channels_last`).
pub fn conv_transpose(
    stream: &Arc<CudaStream>,
    dtype: DType,
    hopper: bool,
    (x, w, bias, out): (u64, u64, u64, u64),
    mut g: ConvTGeo,
) -> Result<()> {
    let [ih, iw] = g.input.map(|v| v as usize);
    let [oh, ow] = g.output.map(|v| v as usize);
    let [kh, kw] = g.kernel.map(|v| v as usize);
    let (n, cin, f) = (g.n as usize, g.cin as usize, g.f as usize);
    if n * oh * ow * f == 0 {
        return Ok(());
    }
    let sfx = suffix(dtype)?;
    g.has_bias = (bias != 0) as i64;
    let mut extents = vec![g.n, prod(&[g.output[0], g.output[1], g.f]), prod(&[g.input[0], g.input[1]]), g.cin];
    for i in 0..2 {
        extents.push(g.output[i].saturating_add(g.pad[i]));
        extents.push(prod(&[g.kernel[i], g.dil[i]]));
        extents.push(prod(&[g.input[i], g.stride[i]]));
    }
    fits("conv2d_transpose", &extents)?;
    if !gemm_dtype(dtype) || cin == 0 || ih * iw == 0 {
        let func = function(stream.context(), &CONV, &format!("convt_direct_{sfx}"))?;
        let mut l = stream.launch_builder(&func);
        l.arg(&x).arg(&w).arg(&bias).arg(&out).arg(&g);
        // SAFETY: the tensors hold what the geometry describes (the caller's contract).
        unsafe { l.launch(image_grid((oh * ow * f) as i64, g.n)) }
            .map_err(Error::driver("cuLaunchKernel(convt_direct)"))?;
        return Ok(());
    }
    let align = gemm_align(dtype);
    let kp = cin.next_multiple_of(align);
    let np = (kh * kw * f).next_multiple_of(align);
    fits("conv2d_transpose", &[prod(&[kp as i64, np as i64])])?;
    (g.kp, g.np) = (kp as i64, np as i64);
    let es = dtype.size_in_bytes();
    let wm = Scratch::new(stream, kp * np * es)?;
    {
        let func = function(stream.context(), &CONV, &format!("convt_weights_{sfx}"))?;
        let mut l = stream.launch_builder(&func);
        let wp = wm.ptr();
        l.arg(&w).arg(&wp).arg(&g);
        // SAFETY: wm holds kp * np elements; the filter what g describes.
        unsafe { l.launch(image_grid((kp * np) as i64, 1)) }.map_err(Error::driver("cuLaunchKernel(convt_weights)"))?;
    }
    let pack = !(g.channels_last != 0 && kp == cin);
    // Input rows (of iw pixels) per band: the scratch budget, and the GEMM row limit.
    let row_bytes = iw * es * (np + if pack { kp } else { 0 });
    let budget_rows = (SCRATCH_BUDGET / row_bytes.max(1)).min(GEMM_MAX_ROWS / iw.max(1)).max(1);
    let bands = plan_bands((n, ih, oh), (kh, g.dil[0] as usize, g.stride[0] as usize, g.pad[0] as usize), budget_rows);
    let max_rows = bands.iter().map(|b| (b.nimg * (b.h_hi - b.h_lo)) as usize * iw).max().unwrap_or(0);
    let abuf = if pack { Some(Scratch::new(stream, max_rows * kp * es)?) } else { None };
    let cbuf = Scratch::new(stream, max_rows * np * es)?;
    let packf = function(stream.context(), &CONV, &format!("convt_pack_{sfx}"))?;
    let col2im = function(stream.context(), &CONV, &format!("convt_col2im_{sfx}"))?;
    for band in &bands {
        let rows = (band.nimg * (band.h_hi - band.h_lo)) as usize * iw;
        let pix0 = ((band.img0 * ih as i64 + band.h_lo) as usize) * iw;
        if rows > 0 {
            let a = match &abuf {
                None => x + (pix0 * cin * es) as u64,
                Some(ab) => {
                    let (ap, p0, r) = (ab.ptr(), pix0 as i64, rows as i64);
                    let mut l = stream.launch_builder(&packf);
                    l.arg(&x).arg(&ap).arg(&g).arg(&p0).arg(&r);
                    // SAFETY: abuf holds max_rows * kp elements; x what g describes.
                    unsafe { l.launch(warp_grid(rows as u64)) }.map_err(Error::driver("cuLaunchKernel(convt_pack)"))?;
                    ap
                }
            };
            gemm(stream, dtype, hopper, (a, wm.ptr(), cbuf.ptr()), (rows, np, kp), 1)?;
        }
        let cp = cbuf.ptr();
        let mut l = stream.launch_builder(&col2im);
        l.arg(&cp).arg(&bias).arg(&out).arg(&g).arg(band);
        let per = (band.oy1 - band.oy0) * (ow * f) as i64;
        // SAFETY: cbuf holds the band's GEMM rows; col2im writes only the band's outputs.
        unsafe { l.launch(image_grid(per, band.nimg)) }.map_err(Error::driver("cuLaunchKernel(convt_col2im)"))?;
    }
    Ok(())
}

/// Splits the output into bands whose input rows (GEMM rows / iw) stay within `budget_rows`:
/// whole images when one fits, else bands of output rows of one image.
fn plan_bands(
    (n, ih, oh): (usize, usize, usize),
    (kh, dh, sh, pt): (usize, usize, usize, usize),
    budget_rows: usize,
) -> Vec<Band> {
    let mut bands = Vec::new();
    if ih <= budget_rows {
        let per = (budget_rows / ih.max(1)).max(1);
        let mut img = 0;
        while img < n {
            let nimg = per.min(n - img);
            bands.push(Band { img0: img as i64, nimg: nimg as i64, oy0: 0, oy1: oh as i64, h_lo: 0, h_hi: ih as i64 });
            img += nimg;
        }
        return bands;
    }
    // Output rows [oy0, oy1) read input rows ceil((oy0 + pt - (kh-1)dh) / sh) ..= (oy1-1+pt) / sh.
    let span = (kh - 1) * dh;
    let ob = (budget_rows.saturating_sub(2) * sh).saturating_sub(span).max(1);
    for img in 0..n {
        let mut oy0 = 0;
        while oy0 < oh {
            let oy1 = (oy0 + ob).min(oh);
            let lo_num = oy0 as i64 + pt as i64 - span as i64;
            let h_lo = if lo_num <= 0 { 0 } else { (lo_num as usize).div_ceil(sh) }.min(ih);
            let h_hi = ((oy1 - 1 + pt) / sh + 1).min(ih).max(h_lo);
            bands.push(Band {
                img0: img as i64,
                nimg: 1,
                oy0: oy0 as i64,
                oy1: oy1 as i64,
                h_lo: h_lo as i64,
                h_hi: h_hi as i64,
            });
            oy0 = oy1;
        }
    }
    bands
}

/// Pooling and fold geometry (for fold, `input` is the grid of block positions).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolGeo {
    pub n: i64,
    pub c: i64,
    pub input: [i64; 2],
    pub output: [i64; 2],
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub dil: [i64; 2],
    pub pad: [i64; 2],
}
// SAFETY: plain-old-data with the layout of the kernels' `PoolGeo`.
unsafe impl DeviceRepr for PoolGeo {}

/// Which window op `pool` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    /// Average dividing by kernel_h * kernel_w.
    AvgBoundary,
    /// Average dividing by the taps inside the input.
    AvgInside,
    Fold,
}

/// max_pool2d / avg_pool2d over NHWC `x` into NHWC `out`, or fold of [N, C*kh*kw, L] `x`
/// into [N, C, H, W] `out`.
pub fn pool(stream: &Arc<CudaStream>, dtype: DType, kind: PoolKind, (x, out): (u64, u64), g: PoolGeo) -> Result<()> {
    let per = prod(&[g.c, g.output[0], g.output[1]]);
    if g.n == 0 || per == 0 {
        return Ok(());
    }
    let reach = |i: usize| prod(&[g.output[i], g.stride[i]]).saturating_add(prod(&[g.kernel[i], g.dil[i]]));
    let mut extents = vec![g.n, per, reach(0), reach(1)];
    for i in 0..2 {
        extents.push(g.input[i].saturating_add(g.pad[i]));
        extents.push(g.output[i].saturating_add(g.pad[i]));
        extents.push(prod(&[g.input[i], g.stride[i]]));
    }
    fits(if kind == PoolKind::Fold { "fold" } else { "pooling" }, &extents)?;
    let sfx = cast_name(dtype).ok_or_else(|| Error::Unsupported(format!("pooling of {dtype} on the GPU")))?;
    let name = match kind {
        PoolKind::Max => "max_pool",
        PoolKind::AvgBoundary => "avg_pool",
        PoolKind::AvgInside => "avg_pool_inside",
        PoolKind::Fold => "fold",
    };
    let func = function(stream.context(), &POOL, &format!("{name}_{sfx}"))?;
    let mut l = stream.launch_builder(&func);
    l.arg(&x).arg(&out).arg(&g);
    // SAFETY: x and out hold what the geometry describes (the caller's contract).
    unsafe { l.launch(image_grid(per, g.n)) }.map_err(Error::driver("cuLaunchKernel(pool)"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::plan_bands;

    /// Bands tile every image's output rows once, and hold every input row that reaches them.
    #[test]
    fn bands_cover_outputs_and_their_inputs() {
        for (n, ih, kh, dh, sh, pt) in
            [(2, 7, 3, 1, 1, 1), (1, 20, 4, 2, 3, 2), (3, 9, 1, 1, 2, 0), (1, 30, 5, 3, 1, 6)]
        {
            let oh = (ih - 1) * sh + dh * (kh - 1) + 1 - pt.min(((ih - 1) * sh + dh * (kh - 1)) / 2);
            for budget in 1..=ih + 1 {
                let bands = plan_bands((n, ih, oh), (kh, dh, sh, pt), budget);
                let mut covered = vec![0; n * oh];
                for b in &bands {
                    assert!(b.h_lo <= b.h_hi && b.h_hi as usize <= ih);
                    for img in b.img0..b.img0 + b.nimg {
                        for oy in b.oy0..b.oy1 {
                            covered[img as usize * oh + oy as usize] += 1;
                            for r in 0..kh as i64 {
                                let num = oy + pt as i64 - r * dh as i64;
                                if num >= 0 && num % sh as i64 == 0 && num / (sh as i64) < ih as i64 {
                                    let h = num / sh as i64;
                                    assert!(h >= b.h_lo && h < b.h_hi, "{b:?}: output row {oy} needs input row {h}");
                                }
                            }
                        }
                    }
                }
                assert!(covered.iter().all(|&c| c == 1), "{n} {ih} {kh} {dh} {sh} {pt} budget {budget}");
            }
        }
    }
}
