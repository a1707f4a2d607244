//! Tiled TMA tensor maps (cuTensorMapEncodeTiled), shared by the Hopper GEMM, conv2d and
//! qmatmul launchers, and the map type their kernels take by value as a grid constant.

use cudarc::driver::sys::{
    self, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave, CUtensorMapL2promotion,
    CUtensorMapSwizzle,
};
use cudarc::driver::{DeviceRepr, DriverError};
use max_graph::DType;

#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(crate) struct TmaMap(pub(crate) [u64; 16]);
// SAFETY: the opaque 128-byte, 64-byte-aligned CUtensorMap, passed by value as a grid constant.
unsafe impl DeviceRepr for TmaMap {}

/// The map type of a 16-bit float dtype (bf16; f16 otherwise).
pub(crate) fn half_type(dtype: DType) -> CUtensorMapDataType {
    match dtype {
        DType::BFloat16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        _ => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    }
}

/// A tiled map over the tensor at `ptr`: `dims` innermost first, byte `strides` of the outer
/// dimensions (one fewer than `dims`), `boxes` elements per dimension, every element stride 1,
/// no interleave, L2 promotion to 256 bytes, zeros outside the tensor.
pub(crate) fn tiled(
    data: CUtensorMapDataType,
    ptr: u64,
    dims: &[u64],
    strides: &[u64],
    boxes: &[u32],
    swizzle: CUtensorMapSwizzle,
) -> Result<TmaMap, DriverError> {
    let rank = dims.len();
    if !(1..=5).contains(&rank) || strides.len() + 1 != rank || boxes.len() != rank {
        return Err(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE));
    }
    let elem = [1u32; 5];
    let mut map = CUtensorMap { opaque: [0; 16] };
    // SAFETY: dims, strides, boxes and elem hold at least what rank requires (checked above);
    // the address is a live device allocation holding the tensor (the caller's contract; the
    // driver checks alignment, strides and box sizes and refuses what it cannot map).
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data,
            rank as u32,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()?;
    Ok(TmaMap(map.opaque))
}
