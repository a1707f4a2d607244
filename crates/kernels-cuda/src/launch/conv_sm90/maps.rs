//! The TMA tensor maps of the Hopper conv2d (kernels/conv_sm90.cu): the input in im2col mode
//! (or as a plain matrix for 1x1 stride-1 convs), the RSCF filter, and the residual for its L2
//! prefetch. Each returns the driver's refusal as a message (the caller then falls back).

use cudarc::driver::sys::{
    self, CUtensorMap, CUtensorMapFloatOOBfill, CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use max_graph::DType;

use super::super::tma::{self, TmaMap, half_type as data_type};
use super::{BK, Conv2dShape};

/// The input [N, H, W, C] in im2col mode: boxes of `pixels` pixels (the tile's rows, 128 or 256)
/// x 64 channels, the conv stride as the traversal stride, the window corners' bounding box (see
/// the kernel's header).
pub(super) fn im2col_map(dtype: DType, x: u64, sh: &Conv2dShape, pixels: usize) -> std::result::Result<TmaMap, String> {
    let (n, h, w, c) = (sh.n as u64, sh.h as u64, sh.w as u64, sh.c as u64);
    let dims: [u64; 4] = [c, w, h, n];
    let strides: [u64; 3] = [c * 2, w * c * 2, h * w * c * 2];
    let (lower, upper) = sh.corners();
    let lower = lower.map(|v| v as i32);
    let upper = upper.map(|v| v as i32);
    let elem: [u32; 4] = [1, sh.stride[1] as u32, sh.stride[0] as u32, 1];
    let mut map = CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array has the length rank 4 requires (corners: rank - 2); the address is a
    // live device allocation holding the input (the caller's contract).
    unsafe {
        sys::cuTensorMapEncodeIm2col(
            &mut map,
            data_type(dtype),
            4,
            x as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            lower.as_ptr(),
            upper.as_ptr(),
            BK as u32,
            pixels as u32,
            elem.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .map_err(|e| format!("cuTensorMapEncodeIm2col rejected {sh:?}: {e}"))?;
    Ok(TmaMap(map.opaque))
}

/// The RSCF filter viewed as [R*S, C, K] (K innermost) in boxes of 64 output channels x 64
/// channels x 1 tap: the N-major B tile of one k-step is BN / 64 such boxes.
pub(super) fn filter_map(dtype: DType, f: u64, sh: &Conv2dShape) -> std::result::Result<TmaMap, String> {
    let (c, taps, k) = (sh.c as u64, (sh.r * sh.s) as u64, sh.k as u64);
    let dims = [k, c, taps];
    let strides = [k * 2, c * k * 2];
    tma::tiled(
        data_type(dtype),
        f,
        &dims,
        &strides,
        &[64, BK as u32, 1],
        CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    )
    .map_err(|e| format!("cuTensorMapEncodeTiled rejected the filter of {sh:?}: {e}"))
}

/// x as the matrix [M, C] (a 1x1 conv with stride 1 and no padding) in boxes of 64 channels x
/// `rows` rows (the tile's, 128 or 256) with the 128-byte swizzle: the same shared-memory tile
/// as the im2col map's.
pub(super) fn matrix_map(dtype: DType, x: u64, m: usize, c: usize, rows: usize) -> std::result::Result<TmaMap, String> {
    tiled_2d(dtype, x, (m, c), (BK as u32, rows as u32)).map_err(|e| format!("the input as [{m}, {c}]: {e}"))
}

/// A row-major [rows, cols] 16-bit matrix in boxes of `bx` columns x `by` rows, 128-byte swizzle.
fn tiled_2d(
    dtype: DType,
    ptr: u64,
    (rows, cols): (usize, usize),
    (bx, by): (u32, u32),
) -> std::result::Result<TmaMap, String> {
    let dims = [cols as u64, rows as u64];
    let strides = [cols as u64 * 2];
    tma::tiled(data_type(dtype), ptr, &dims, &strides, &[bx, by], CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B)
        .map_err(|e| format!("cuTensorMapEncodeTiled rejected it: {e}"))
}

/// The residual [M, K] in boxes of 64 columns x `rows` rows with the 128-byte swizzle: 128 (one
/// per B box of a tile) for the kernel's L2 prefetch (cp.async.bulk.prefetch.tensor), 64 for its
/// loads of a tile's residual into the ring (see the kernel's header).
pub(super) fn residual_map(dtype: DType, r: u64, m: usize, k: usize, rows: u32) -> std::result::Result<TmaMap, String> {
    tiled_2d(dtype, r, (m, k), (64, rows)).map_err(|e| format!("the residual [{m}, {k}]: {e}"))
}

/// The output [M, K] in boxes of 64 columns x 16 rows (one consumer warp's rows) with the 128-byte
/// swizzle, for the lean epilogue's TMA stores from the residual's ring slots.
pub(super) fn output_map(dtype: DType, out: u64, m: usize, k: usize) -> std::result::Result<TmaMap, String> {
    tiled_2d(dtype, out, (m, k), (64, 16)).map_err(|e| format!("the output [{m}, {k}]: {e}"))
}
