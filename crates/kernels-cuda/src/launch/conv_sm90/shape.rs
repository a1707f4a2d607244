//! The Hopper conv2d's problem shape ([`Conv2dShape`]: NHWC input, RSCF filter, stride, padding,
//! dilation) and which problems the kernel can take ([`unsuitable`]: the kernel header's
//! requirements).

use max_graph::DType;

use super::super::epilogue::Epilogue;
use super::{BM, I32};

/// The im2col bounding-box corners of a 4-D tensor map are signed 8-bit; tap offsets unsigned 8-bit.
const CORNER: std::ops::RangeInclusive<i64> = -128..=127;
const MAX_OFFSET: usize = 255;

/// A conv2d on NHWC input [n, h, w, c] with an RSCF filter [r, s, c, k] into the NHWC output
/// [n, p, q, k]. `pad` is the padding before each spatial dim (top, left); the padding after
/// only shows in `p` and `q`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conv2dShape {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub k: usize,
    pub r: usize,
    pub s: usize,
    pub p: usize,
    pub q: usize,
    /// (height, width) of the stride, the padding before, and the dilation.
    pub stride: [usize; 2],
    pub pad: [usize; 2],
    pub dil: [usize; 2],
}

impl Conv2dShape {
    /// Output pixels: the GEMM's rows (saturating).
    pub fn m(&self) -> usize {
        self.n.saturating_mul(self.p).saturating_mul(self.q)
    }

    /// The im2col bounding box of the window corners in (w, h) order: from -pad to the last
    /// window's corner, relative to (0, 0) and to (W - 1, H - 1) respectively.
    pub(super) fn corners(&self) -> ([i64; 2], [i64; 2]) {
        let last = |out: usize, stride: usize, pad: usize, size: usize| {
            (out as i64 - 1) * stride as i64 - pad as i64 - (size as i64 - 1)
        };
        let lower = [-(self.pad[1] as i64), -(self.pad[0] as i64)];
        let upper =
            [last(self.q, self.stride[1], self.pad[1], self.w), last(self.p, self.stride[0], self.pad[0], self.h)];
        (lower, upper)
    }
}

/// Why the Hopper kernel cannot take this problem, or None when it can (the kernel header's
/// requirements). `x`, `f`, `bias` and `out` are the device addresses of the input, the filter,
/// the conv's own bias (0: none) and the output.
pub fn unsuitable(
    dtype: DType,
    sh: &Conv2dShape,
    (x, f, bias, out): (u64, u64, u64, u64),
    epi: &Epilogue,
) -> Option<String> {
    let why = |s: &str| Some(s.to_string());
    if !matches!(dtype, DType::BFloat16 | DType::Float16) {
        return why("only bf16 and f16");
    }
    let dims = [sh.n, sh.h, sh.w, sh.c, sh.k, sh.r, sh.s, sh.p, sh.q];
    if dims.contains(&0) {
        return why("an empty dim");
    }
    if sh.stride.contains(&0) || sh.dil.contains(&0) {
        return why("a zero stride or dilation");
    }
    if dims.iter().any(|&d| d > I32) || sh.p.saturating_mul(sh.q) > I32 || sh.r.saturating_mul(sh.s) > I32 {
        return why("extents past 2^31");
    }
    if !sh.c.is_multiple_of(8) || !sh.k.is_multiple_of(8) {
        return why("input or output channels not a multiple of 8 (TMA strides are multiples of 16 bytes)");
    }
    if (x | f) % 16 != 0 || !(out | bias | epi.bias | epi.residual).is_multiple_of(4) {
        return why("misaligned operands");
    }
    if sh.stride.iter().any(|&s| s > 8) {
        return why("a stride past 8 (the TMA traversal stride)");
    }
    if (sh.r - 1).saturating_mul(sh.dil[0]) > MAX_OFFSET || (sh.s - 1).saturating_mul(sh.dil[1]) > MAX_OFFSET {
        return why("a dilated filter wider than 256 (the im2col offset range)");
    }
    let (lower, upper) = sh.corners();
    if !lower.iter().chain(&upper).all(|v| CORNER.contains(v)) {
        return why("padding or a window range outside the im2col corner range [-128, 127]");
    }
    let tiles = sh.m().div_ceil(BM).saturating_mul(sh.k.div_ceil(64));
    let elems = [sh.n, sh.h, sh.w, sh.c].iter().fold(1usize, |a, &b| a.saturating_mul(b));
    let filter = [sh.r, sh.s, sh.c, sh.k].iter().fold(1usize, |a, &b| a.saturating_mul(b));
    if tiles > I32 || sh.m() > i64::MAX as usize || elems >= 1 << 38 || filter >= 1 << 38 {
        return why("too large");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out_extent(size: usize, kernel: usize, stride: usize, dil: usize, pads: usize) -> usize {
        (size + pads - dil * (kernel - 1) - 1) / stride + 1
    }

    fn shape(hw: usize, c: usize, k: usize, rs: usize, stride: usize, pad: usize) -> Conv2dShape {
        let o = out_extent(hw, rs, stride, 1, 2 * pad);
        Conv2dShape {
            n: 2,
            h: hw,
            w: hw,
            c,
            k,
            r: rs,
            s: rs,
            p: o,
            q: o,
            stride: [stride; 2],
            pad: [pad; 2],
            dil: [1; 2],
        }
    }

    #[test]
    fn corners_span_exactly_the_window_positions() {
        // 3x3 pad 1 stride 1 on 56: corners -1 .. 54 - 55 = -1 (the PTX ISA's first example)
        assert_eq!(shape(56, 64, 64, 3, 1, 1).corners(), ([-1, -1], [-1, -1]));
        // 7x7 stride 2 pad 3 on 224: 112 outputs, last corner 222 - 3 = 219 = 223 - 4
        assert_eq!(shape(224, 8, 64, 7, 2, 3).corners(), ([-3, -3], [-4, -4]));
        // 1x1 stride 2 on 56: 28 outputs, last corner 54 = 55 - 1
        assert_eq!(shape(56, 256, 512, 1, 2, 0).corners(), ([0, 0], [-1, -1]));
        // 3x3 stride 2 pad 1 on 15: 8 outputs, last corner 14 - 1 = 13 = 14 - 1
        assert_eq!(shape(15, 64, 64, 3, 2, 1).corners(), ([-1, -1], [-1, -1]));
        // the bounding box holds exactly `q` traversal points: (upper + W - 1 - lower) / stride + 1
        for (hw, rs, stride, pad) in [(56, 3, 1, 1), (224, 7, 2, 3), (15, 3, 2, 1), (9, 1, 3, 0), (10, 2, 2, 2)] {
            let sh = shape(hw, 64, 64, rs, stride, pad);
            let (lo, up) = sh.corners();
            assert_eq!(((up[0] + hw as i64 - 1 - lo[0]) / stride as i64 + 1) as usize, sh.q);
            assert_eq!((up[0] + hw as i64 - 1 - lo[0]) % stride as i64, 0);
        }
    }

    #[test]
    fn unsuitable_shapes_say_why() {
        let e = Epilogue::default();
        let ok = shape(56, 64, 64, 3, 1, 1);
        assert_eq!(unsuitable(DType::BFloat16, &ok, (0, 0, 0, 0), &e), None);
        assert_eq!(unsuitable(DType::Float16, &shape(9, 24, 40, 3, 2, 2), (0, 0, 0, 0), &e), None);
        assert!(unsuitable(DType::Float32, &ok, (0, 0, 0, 0), &e).is_some());
        // the ResNet stem: C = 3
        assert!(unsuitable(DType::BFloat16, &shape(56, 3, 64, 7, 2, 3), (0, 0, 0, 0), &e).is_some());
        assert!(unsuitable(DType::BFloat16, &shape(56, 64, 62, 3, 1, 1), (0, 0, 0, 0), &e).is_some());
        assert!(unsuitable(DType::BFloat16, &ok, (8, 0, 0, 0), &e).is_some());
        assert!(unsuitable(DType::BFloat16, &ok, (0, 0, 0, 2), &e).is_some());
        assert!(
            unsuitable(DType::BFloat16, &ok, (0, 0, 0, 0), &Epilogue::new(Some(6), Default::default(), None)).is_some()
        );
        assert!(unsuitable(DType::Float16, &shape(56, 64, 64, 3, 9, 1), (0, 0, 0, 0), &e).is_some());
        assert!(unsuitable(DType::Float16, &shape(600, 64, 64, 3, 1, 200), (0, 0, 0, 0), &e).is_some());
        let mut dilated = ok;
        dilated.dil = [128, 1];
        assert!(unsuitable(DType::BFloat16, &dilated, (0, 0, 0, 0), &e).is_some());
    }
}
