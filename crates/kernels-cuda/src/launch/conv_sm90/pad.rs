//! Input channel counts that are not a multiple of 8 (the ResNet stem's C = 3, C = 5, 24-like
//! counts after odd splits): the kernel's TMA strides need 16-byte multiples, so the input and
//! the filter are copied into stream-ordered scratch with zero channels added
//! (kernels/conv_sm90_aux.cu), and the kernel runs on the copies. The added channels multiply
//! zeros by zeros, so the result is the same sum (only its f32 accumulation order may differ).
//!
//! Two forms ([`plan`]): plain, C rounded up to 8; or folded, the S filter columns moved into
//! the channels (x'[n, h, q, s*C + c] = x[n, h, q*sw - pw + s*dw, c]: an R x 1 conv with stride
//! (sh, 1) over S*C channels rounded up to 8), which spends far fewer k-steps on zero channels
//! when S*C is small: the 7x7 stem takes 7 k-steps of 64 channels instead of 49.
//! The knob `MAX_CONV_SM90_FOLD=0` (read per call) keeps the plain form.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;

use super::super::conv::{Scratch, grid};
use super::super::epilogue::Epilogue;
use super::{BK, Conv2dShape, Knobs, Outcome, run, unsuitable};
use crate::sources::CONV_SM90_AUX;
use crate::{Error, Result, arch_name, function};

/// The largest padded input copy (bytes); larger problems take the im2col path.
const MAX_COPY: usize = 1 << 30;

/// The conv the kernel runs instead: its shape and how the copies are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Padded {
    /// The conv over the padded input x' and filter f'.
    pub shape: Conv2dShape,
    /// Whether the filter columns are folded into the channels.
    pub folded: bool,
    /// Filter rows (R when folded, R * S when not) and the real channels in each: the filter as
    /// [rows, real, K] becomes f' [rows, shape.c, K].
    pub rows: usize,
    pub real: usize,
}

impl Padded {
    /// Elements of the padded input copy [N, H, shape.w, shape.c] (saturating).
    pub fn x_elems(&self) -> usize {
        [self.shape.n, self.shape.h, self.shape.w, self.shape.c].iter().fold(1usize, |a, &b| a.saturating_mul(b))
    }

    /// Elements of the padded filter [rows, shape.c, K] (saturating).
    pub fn f_elems(&self) -> usize {
        [self.rows, self.shape.c, self.shape.k].iter().fold(1usize, |a, &b| a.saturating_mul(b))
    }

    /// k-steps (64 channels of one tap) per output tile.
    pub fn k_steps(&self) -> usize {
        self.shape.r * self.shape.s * self.shape.c.div_ceil(BK)
    }
}

/// The plain and, where it takes fewer k-steps and the kernel can run it, the folded form of
/// the conv `sh` (C % 8 != 0), the folded one first.
/// `fold` false keeps the plain form only.
pub fn plan(dtype: DType, sh: &Conv2dShape, ptrs: (u64, u64, u64, u64), epi: &Epilogue, fold: bool) -> Vec<Padded> {
    let plain = Padded {
        shape: Conv2dShape { c: sh.c.next_multiple_of(8), ..*sh },
        folded: false,
        rows: sh.r * sh.s,
        real: sh.c,
    };
    let folded = Padded {
        shape: Conv2dShape {
            w: sh.q,
            c: sh.s.saturating_mul(sh.c).next_multiple_of(8),
            s: 1,
            stride: [sh.stride[0], 1],
            pad: [sh.pad[0], 0],
            dil: [sh.dil[0], 1],
            ..*sh
        },
        folded: true,
        rows: sh.r,
        real: sh.s.saturating_mul(sh.c),
    };
    let (_, f, bias, out) = ptrs;
    // The copies are fresh allocations: only the caller's filter, bias, output and epilogue
    // operands need checking for alignment.
    // (The copy kernel indexes within a row of x' in 32 bits.)
    let fits = |p: &Padded| {
        p.x_elems().saturating_mul(2) <= MAX_COPY
            && p.shape.w.saturating_mul(p.shape.c) < i32::MAX as usize
            && unsuitable(dtype, &p.shape, (0, f, bias, out), epi).is_none()
    };
    let mut forms = Vec::new();
    if fold && sh.s > 1 && folded.k_steps() < plain.k_steps() && fits(&folded) {
        forms.push(folded);
    }
    if fits(&plain) {
        forms.push(plain);
    }
    forms
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct PadXArgs {
    src: u64,
    dst: u64,
    rows: i64,
    w_in: i32,
    c_in: i32,
    q_out: i32,
    c_out: i32,
    fold: i32,
    sw: i32,
    pw: i32,
    dw: i32,
}
// SAFETY: plain-old-data with the kernel's `PadXArgs` layout (no implicit padding).
unsafe impl DeviceRepr for PadXArgs {}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct PadFArgs {
    src: u64,
    dst: u64,
    g: i64,
    real: i32,
    c_out: i32,
    k: i32,
    pad: i32,
}
// SAFETY: plain-old-data with the kernel's `PadFArgs` layout (no implicit padding).
unsafe impl DeviceRepr for PadFArgs {}

/// The conv `sh` with C % 8 != 0 on the Hopper kernel over padded copies of the input and the
/// filter (see the module doc); `Outcome::NotEligible` when no form fits, off sm_90a, or when
/// the kernel refuses the padded conv (the copies are then wasted, the caller falls back).
pub fn conv2d(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, f, bias, out): (u64, u64, u64, u64),
    sh: &Conv2dShape,
    epi: &Epilogue,
    knobs: &Knobs,
) -> Result<Outcome> {
    let Some(p) = plan(dtype, sh, (x, f, bias, out), epi, !knobs.no_fold).into_iter().next() else {
        let why = unsuitable(dtype, &Conv2dShape { c: sh.c.next_multiple_of(8), ..*sh }, (0, f, bias, out), epi);
        return Ok(Outcome::NotEligible(why.unwrap_or_else(|| "the padded input copy is too large".into())));
    };
    let arch = arch_name(stream.context())?;
    if arch != "sm_90a" {
        return Ok(Outcome::NotEligible(format!("the kernel needs sm_90a, the device is {arch}")));
    }
    let xp = Scratch::new(stream, p.x_elems() * 2)?;
    let fp = Scratch::new(stream, p.f_elems() * 2)?;
    let xa = PadXArgs {
        src: x,
        dst: xp.ptr(),
        rows: (sh.n * sh.h) as i64,
        w_in: sh.w as i32,
        c_in: sh.c as i32,
        q_out: p.shape.w as i32,
        c_out: p.shape.c as i32,
        fold: if p.folded { sh.s as i32 } else { 1 },
        sw: if p.folded { sh.stride[1] as i32 } else { 1 },
        pw: if p.folded { sh.pad[1] as i32 } else { 0 },
        dw: if p.folded { sh.dil[1] as i32 } else { 1 },
    };
    let func = function(stream.context(), &CONV_SM90_AUX, "conv_sm90_pad_x")?;
    let mut l = stream.launch_builder(&func);
    l.arg(&xa);
    // x over the 8-channel groups of a row of x', y over its N * H rows (both grid-stride).
    let per_row = p.shape.w * p.shape.c / 8;
    let cfg = LaunchConfig {
        grid_dim: (per_row.div_ceil(256).clamp(1, 65535) as u32, (sh.n * sh.h).clamp(1, 65535) as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x holds [N, H, W, C] (the caller's contract); xp the padded copy's x_elems.
    unsafe { l.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(conv_sm90_pad_x)"))?;
    let fa = PadFArgs {
        src: f,
        dst: fp.ptr(),
        g: p.rows as i64,
        real: p.real as i32,
        c_out: p.shape.c as i32,
        k: sh.k as i32,
        pad: 0,
    };
    let func = function(stream.context(), &CONV_SM90_AUX, "conv_sm90_pad_f")?;
    let mut l = stream.launch_builder(&func);
    l.arg(&fa);
    // SAFETY: f holds [R, S, C, K] = [rows, real, K] (the caller's contract, 16-byte aligned:
    // checked by `plan`); fp the padded filter's f_elems.
    unsafe { l.launch(grid((p.f_elems() / 8) as u64)) }.map_err(Error::driver("cuLaunchKernel(conv_sm90_pad_f)"))?;
    PADDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // xp and fp are freed on the stream after the conv (Drop, stream-ordered).
    run(stream, dtype, (xp.ptr(), fp.ptr(), bias, out), &p.shape, epi, knobs)
}

/// Padded convolutions launched in this process (tests check that a shape took this path).
pub(super) static PADDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    fn stem(n: usize) -> Conv2dShape {
        Conv2dShape {
            n,
            h: 224,
            w: 224,
            c: 3,
            k: 64,
            r: 7,
            s: 7,
            p: 112,
            q: 112,
            stride: [2, 2],
            pad: [3, 3],
            dil: [1, 1],
        }
    }

    #[test]
    fn the_stem_folds_its_filter_columns() {
        let e = Epilogue::default();
        let forms = plan(DType::BFloat16, &stem(32), (0, 0, 0, 0), &e, true);
        assert_eq!(forms.len(), 2);
        let f = forms[0];
        assert!(f.folded);
        assert_eq!(
            (f.shape.w, f.shape.c, f.shape.r, f.shape.s, f.shape.stride, f.shape.pad),
            (112, 24, 7, 1, [2, 1], [3, 0])
        );
        assert_eq!((f.rows, f.real, f.k_steps()), (7, 21, 7));
        let p = forms[1];
        assert!(!p.folded);
        assert_eq!((p.shape.c, p.shape.w, p.rows, p.real, p.k_steps()), (8, 224, 49, 3, 49));
        assert_eq!(p.shape.m(), stem(32).m());
    }

    #[test]
    fn wide_filters_keep_the_plain_form() {
        // S * C = 3 * 45 = 135 -> 136 channels: 3 taps x 3 k-steps, no fewer than 9 x 1
        let sh = Conv2dShape { c: 45, r: 3, s: 3, ..stem(2) };
        let forms = plan(DType::Float16, &sh, (0, 0, 0, 0), &Epilogue::default(), true);
        assert_eq!(forms.len(), 1);
        assert!(!forms[0].folded);
        assert_eq!(forms[0].shape.c, 48);
        // 1 x 1 filters have nothing to fold
        let sh = Conv2dShape { c: 5, r: 1, s: 1, pad: [0, 0], p: 224, q: 224, stride: [1, 1], ..stem(2) };
        let forms = plan(DType::BFloat16, &sh, (0, 0, 0, 0), &Epilogue::default(), true);
        assert_eq!(forms.iter().map(|p| (p.folded, p.shape.c)).collect::<Vec<_>>(), [(false, 8)]);
    }

    #[test]
    fn misaligned_filters_and_f32_are_refused() {
        let e = Epilogue::default();
        assert!(plan(DType::BFloat16, &stem(1), (0, 8, 0, 0), &e, true).is_empty());
        assert!(plan(DType::Float32, &stem(1), (0, 0, 0, 0), &e, true).is_empty());
    }
}
