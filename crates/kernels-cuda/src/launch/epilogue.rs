//! The fused GEMM epilogue every matmul kernel applies: `out = residual + act(acc + bias[col])`
//! (see `Epilogue` in kernels/prelude.cuh, whose layout this mirrors).

use cudarc::driver::DeviceRepr;
use max_graph::DType;

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
/// output's shape and dtype, contiguous); zero means absent. `beta` scales the residual (1
/// unless `with_beta`), and `with_clamp` clamps after the activation:
/// `out = beta * residual + clamp(act(acc + bias))`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epilogue {
    pub bias: u64,
    pub residual: u64,
    act: i32,
    beta: f32,
    clamp: i32,
    lo: f32,
    hi: f32,
    pad: i32,
}

// SAFETY: plain-old-data with the C layout of the kernel-side struct.
unsafe impl DeviceRepr for Epilogue {}

impl Default for Epilogue {
    fn default() -> Self {
        Epilogue::new(None, Act::None, None)
    }
}

impl Epilogue {
    pub fn new(bias: Option<u64>, act: Act, residual: Option<u64>) -> Self {
        Epilogue {
            bias: bias.unwrap_or(0),
            residual: residual.unwrap_or(0),
            act: act as i32,
            beta: 1.0,
            clamp: 0,
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
            pad: 0,
        }
    }

    /// The residual scaled by `beta` (`out = beta * residual + ...`).
    pub fn with_beta(mut self, beta: f32) -> Self {
        self.beta = beta;
        self
    }

    /// `min(max(v, lo), hi)` after the activation (a NaN stays NaN).
    pub fn with_clamp(mut self, lo: f32, hi: f32) -> Self {
        (self.clamp, self.lo, self.hi) = (1, lo, hi);
        self
    }

    pub fn beta(&self) -> f32 {
        self.beta
    }

    /// True when the activation is relu (clamp or not).
    pub fn is_relu(&self) -> bool {
        self.act == Act::Relu as i32
    }

    /// True when `beta` converts to `dtype` (bf16 or f16) without rounding.
    pub fn beta_exact_in(&self, dtype: DType) -> bool {
        match dtype {
            DType::BFloat16 => half::bf16::from_f32(self.beta).to_f32() == self.beta,
            DType::Float16 => half::f16::from_f32(self.beta).to_f32() == self.beta,
            _ => false,
        }
    }

    /// True when the activation is relu or none and nothing is clamped (the pattern the conv
    /// kernel's lean epilogue runs).
    pub fn relu_at_most(&self) -> bool {
        (self.act == Act::None as i32 || self.act == Act::Relu as i32) && self.clamp == 0
    }

    /// True when nothing but a (scaled) residual is added: no bias, activation or clamp.
    pub fn residual_only(&self) -> bool {
        self.bias == 0 && self.act == 0 && self.clamp == 0
    }

    /// True when nothing but an activation (or none) is applied: no bias, residual or clamp.
    pub fn act_only(&self) -> bool {
        self.bias == 0 && self.residual == 0 && self.clamp == 0
    }

    /// True when the epilogue leaves the accumulator unchanged.
    pub fn is_identity(&self) -> bool {
        self.bias == 0 && self.residual == 0 && self.act == 0 && self.clamp == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beta_exact_in_the_element_type() {
        let e = |beta| Epilogue::default().with_beta(beta);
        for beta in [1.0, 0.5, -2.0, 0.0, 0.30078125] {
            assert!(e(beta).beta_exact_in(DType::BFloat16), "{beta}");
            assert!(e(beta).beta_exact_in(DType::Float16), "{beta}");
        }
        assert!(!e(0.3).beta_exact_in(DType::BFloat16));
        assert!(!e(0.3).beta_exact_in(DType::Float16));
        // 1 + 2^-10 fits f16's mantissa, not bf16's; 2^20 is past f16's range
        assert!(!e(1.0 + 1.0 / 1024.0).beta_exact_in(DType::BFloat16));
        assert!(e(1.0 + 1.0 / 1024.0).beta_exact_in(DType::Float16));
        assert!(!e(1_048_576.0).beta_exact_in(DType::Float16));
        assert!(!e(0.5).beta_exact_in(DType::Float32));
        assert!(!e(f32::NAN).beta_exact_in(DType::BFloat16));
    }
}
