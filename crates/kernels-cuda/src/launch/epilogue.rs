//! The fused GEMM epilogue every matmul kernel applies: `out = residual + act(acc + bias[col])`
//! (see `Epilogue` in kernels/prelude.cuh, whose layout this mirrors).

use cudarc::driver::DeviceRepr;

/// The activation applied after the bias; the discriminants are the kernel's `EpilogueAct`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Act {
    #[default]
    None = 0,
    Relu = 1,
    Gelu = 2,
    GeluTanh = 3,
    Silu = 4,
    Sigmoid = 5,
    GeluQuick = 6,
}

/// Device pointers of the optional bias (`n` values of the output dtype) and residual (the
/// output's shape and dtype, contiguous); zero means absent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Epilogue {
    pub bias: u64,
    pub residual: u64,
    act: i32,
    pad: i32,
}

// SAFETY: plain-old-data with the C layout of the kernel-side struct.
unsafe impl DeviceRepr for Epilogue {}

impl Epilogue {
    pub fn new(bias: Option<u64>, act: Act, residual: Option<u64>) -> Self {
        Epilogue { bias: bias.unwrap_or(0), residual: residual.unwrap_or(0), act: act as i32, pad: 0 }
    }

    /// True when the epilogue leaves the accumulator unchanged.
    pub fn is_identity(&self) -> bool {
        self.bias == 0 && self.residual == 0 && self.act == 0
    }
}
