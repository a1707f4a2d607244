//! Input channel counts that are not a multiple of 8 (the ResNet stem's C = 3, C = 5, 24-like
//! counts after odd splits): the kernel's TMA strides need 16-byte multiples, so the input and
//! the filter are copied into stream-ordered scratch with zero channels added
//! (kernels/conv_sm90_aux.cu), and the kernel runs on the copies. The added channels multiply
//! zeros by zeros, so the result is the same sum (only its f32 accumulation order may differ).
//!
//! Three forms ([`plan`]; the kernel's header comment gives the exact copy):
//! - plain: C rounded up to 8;
//! - columns folded: the S filter columns moved into the channels
//!   (x'[n, h, q, s*C + c] = x[n, h, q*sw - pw + s*dw, c]: an R x 1 conv with stride (sh, 1) over
//!   S*C channels rounded up to 8), which spends far fewer k-steps on zero channels when S*C is
//!   small: the 7x7 stem takes 7 k-steps of 64 channels instead of 49;
//! - rows and columns folded, for a height stride sh > 1 (undilated): sh input rows of the
//!   columns fold side by side (x'[n, t, q, (j*S + s)*C + c] = x[n, t*sh + j - ph, ...] for
//!   j < sh: an R' x 1 conv with stride 1 over sh*S*C channels, R' = ceil(R / sh)), a copy of
//!   about the same size with fewer k-steps again: the stem takes 4 of 48 channels (42 real).
//!
//! [`plan`] takes the form with the fewest k-steps. The tuning knob `conv.fold=0` keeps the
//! plain form, `=1` folds the columns only.

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

/// Shared memory for the input row spans of one unit of the copy kernel (bytes).
const SPAN_SMEM: usize = 32 * 1024;

/// The conv the kernel runs instead: its shape and how the copies are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Padded {
    /// The conv over the padded input x' and filter f'.
    pub shape: Conv2dShape,
    /// Input rows side by side in a row of x' (J: the height stride when the rows are folded,
    /// else 1), and filter columns folded into the channels (F: S or 1).
    pub fold_rows: usize,
    pub fold_cols: usize,
    /// Filter rows of f' (R' with the rows folded, R with the columns only, R * S when plain)
    /// and the real channels in each: the filter as [R*S*C, K] becomes f' [rows, shape.c, K]
    /// (rows past the filter are zeros).
    pub rows: usize,
    pub real: usize,
    /// Column q of x' starts at input column q * width[0] - width[1], its folded columns
    /// width[2] apart: (1, 0, 1) when plain, the conv's width stride, padding and dilation
    /// otherwise.
    pub width: [usize; 3],
    /// Output pixels per unit of the copy kernel, so that its input spans fit [`SPAN_SMEM`].
    pub seg: usize,
}

impl Padded {
    /// Elements of the padded input copy [N, H', shape.w, shape.c] (saturating).
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

    /// Input pixels of one row span of a unit: (seg - 1) * sw + (F - 1) * dw + 1.
    pub fn span(&self) -> usize {
        span(self.seg, self.width[0], self.fold_cols, self.width[2])
    }

    /// Shared memory of the copy kernel's unit: J spans of [`span_words`] (bytes).
    pub fn smem(&self) -> usize {
        let c = self.real / (self.fold_rows * self.fold_cols).max(1);
        self.fold_rows.saturating_mul(span_words(self.span().saturating_mul(c))).saturating_mul(2)
    }
}

/// `x` rounded up to a multiple of 8 (saturating to a count no copy fits).
fn round8(x: usize) -> usize {
    x.checked_next_multiple_of(8).unwrap_or(usize::MAX)
}

/// Input pixels of `seg` output pixels' row span (saturating).
fn span(seg: usize, sw: usize, fold: usize, dw: usize) -> usize {
    seg.saturating_sub(1).saturating_mul(sw).saturating_add(fold.saturating_sub(1).saturating_mul(dw)).saturating_add(1)
}

/// Shared-memory words the copy kernel gives a span of `run` input words: a word of lead for
/// its 4-byte loads, rounded up to even (kernels/conv_sm90_aux.cu, `pad_x_stride`).
fn span_words(run: usize) -> usize {
    run.saturating_add(3) & !1
}

/// The largest unit of output pixels (at most `q`) whose `rows` input spans of `c` channels
/// fit [`SPAN_SMEM`]; 0 when not even one does.
fn seg_for(q: usize, rows: usize, c: usize, [sw, _, dw]: [usize; 3], fold: usize) -> usize {
    // span_words(x) <= x + 3
    let per_span = (SPAN_SMEM / 2 / rows.max(1)).saturating_sub(3) / c.max(1);
    let fixed = span(1, sw, fold, dw);
    if per_span < fixed {
        return 0;
    }
    ((per_span - fixed) / sw.max(1) + 1).min(q)
}

/// The padded forms of the conv `sh` (C % 8 != 0) the kernel can run, fewest k-steps first:
/// rows and columns folded, columns folded, plain. `fold` 0 keeps the plain form only, 1 the
/// plain and columns forms.
pub fn plan(dtype: DType, sh: &Conv2dShape, ptrs: (u64, u64, u64, u64), epi: &Epilogue, fold: usize) -> Vec<Padded> {
    let plain = Padded {
        shape: Conv2dShape { c: round8(sh.c), ..*sh },
        fold_rows: 1,
        fold_cols: 1,
        rows: sh.r * sh.s,
        real: sh.c,
        width: [1, 0, 1],
        seg: seg_for(sh.w, 1, sh.c, [1, 0, 1], 1),
    };
    let width = [sh.stride[1], sh.pad[1], sh.dil[1]];
    let cols = Padded {
        shape: Conv2dShape {
            w: sh.q,
            c: round8(sh.s.saturating_mul(sh.c)),
            s: 1,
            stride: [sh.stride[0], 1],
            pad: [sh.pad[0], 0],
            dil: [sh.dil[0], 1],
            ..*sh
        },
        fold_rows: 1,
        fold_cols: sh.s,
        rows: sh.r,
        real: sh.s.saturating_mul(sh.c),
        width,
        seg: seg_for(sh.q, 1, sh.c, width, sh.s),
    };
    let j = sh.stride[0];
    let r2 = sh.r.div_ceil(j.max(1));
    let rows = Padded {
        shape: Conv2dShape {
            h: (sh.p + r2).saturating_sub(1),
            w: sh.q,
            c: round8(j.saturating_mul(sh.s).saturating_mul(sh.c)),
            r: r2,
            s: 1,
            stride: [1, 1],
            pad: [0, 0],
            dil: [1, 1],
            ..*sh
        },
        fold_rows: j,
        fold_cols: sh.s,
        rows: r2,
        real: j.saturating_mul(sh.s).saturating_mul(sh.c),
        width,
        seg: seg_for(sh.q, j, sh.c, width, sh.s),
    };
    let (_, f, bias, out) = ptrs;
    // The copies are fresh allocations: only the caller's filter, bias, output and epilogue
    // operands need checking for alignment.
    // (The copy kernel indexes within a unit in 32 bits.)
    let fits = |p: &Padded| {
        p.seg > 0
            && p.x_elems().saturating_mul(2) <= MAX_COPY
            && p.shape.w.saturating_mul(p.shape.c) < i32::MAX as usize
            && p.shape.h < i32::MAX as usize
            // the kernel's 32-bit word index within an input row, up to a unit's span past the
            // last window start
            && sh.q.saturating_mul(sh.stride[1]).saturating_add(sh.w).saturating_mul(sh.c).saturating_add(SPAN_SMEM)
                < i32::MAX as usize
            && unsuitable(dtype, &p.shape, (0, f, bias, out), epi).is_none()
    };
    let mut forms = Vec::new();
    if fold >= 2 && j > 1 && sh.dil[0] == 1 && sh.p > 0 && fits(&rows) {
        forms.push(rows);
    }
    if fold >= 1 && sh.s > 1 && fits(&cols) {
        forms.push(cols);
    }
    if fits(&plain) {
        forms.push(plain);
    }
    // Fewest k-steps first, then the smallest copy.
    forms.sort_by_key(|p| (p.k_steps(), p.x_elems()));
    forms
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct PadXArgs {
    src: u64,
    dst: u64,
    units: i64,
    h_in: i32,
    w_in: i32,
    c_in: i32,
    h_out: i32,
    q_out: i32,
    c_out: i32,
    rows: i32,
    row_step: i32,
    row_pad: i32,
    fold: i32,
    sw: i32,
    pw: i32,
    dw: i32,
    seg: i32,
    span: i32,
    pad: i32,
}
// SAFETY: plain-old-data with the kernel's `PadXArgs` layout (no implicit padding).
unsafe impl DeviceRepr for PadXArgs {}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct PadFArgs {
    src: u64,
    dst: u64,
    g: i64,
    total: i64,
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
    let Some(p) = plan(dtype, sh, (x, f, bias, out), epi, knobs.fold.unwrap_or(2)).into_iter().next() else {
        let why = unsuitable(dtype, &Conv2dShape { c: round8(sh.c), ..*sh }, (0, f, bias, out), epi);
        return Ok(Outcome::NotEligible(why.unwrap_or_else(|| "the padded input copy is too large".into())));
    };
    let arch = arch_name(stream.context())?;
    if arch != "sm_90a" {
        return Ok(Outcome::NotEligible(format!("the kernel needs sm_90a, the device is {arch}")));
    }
    let xp = Scratch::new(stream, p.x_elems() * 2)?;
    let fp = Scratch::new(stream, p.f_elems() * 2)?;
    let segs = p.shape.w.div_ceil(p.seg);
    let units = p.shape.n * p.shape.h * segs;
    // `plan` bounds every size below i32 (the copy's 1 GiB, a row of x' and the unit's span).
    let xa = PadXArgs {
        src: x,
        dst: xp.ptr(),
        units: units as i64,
        h_in: sh.h as i32,
        w_in: sh.w as i32,
        c_in: sh.c as i32,
        h_out: p.shape.h as i32,
        q_out: p.shape.w as i32,
        c_out: p.shape.c as i32,
        rows: p.fold_rows as i32,
        row_step: if p.fold_rows > 1 { sh.stride[0] as i32 } else { 1 },
        row_pad: if p.fold_rows > 1 { sh.pad[0] as i32 } else { 0 },
        fold: p.fold_cols as i32,
        sw: p.width[0] as i32,
        pw: p.width[1] as i32,
        dw: p.width[2] as i32,
        seg: p.seg as i32,
        span: p.span() as i32,
        pad: 0,
    };
    let func = function(stream.context(), &CONV_SM90_AUX, "conv_sm90_pad_x")?;
    let mut l = stream.launch_builder(&func);
    l.arg(&xa);
    // One block per unit (a row of x', or a segment of one), grid-stride beyond 8192.
    let smem = p.smem();
    let cfg = LaunchConfig {
        grid_dim: (units.clamp(1, 8192) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // SAFETY: x holds [N, H, W, C] (the caller's contract); xp the padded copy's x_elems; the
    // spans take `smem` bytes (at most SPAN_SMEM, by `plan`).
    unsafe { l.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(conv_sm90_pad_x)"))?;
    let fa = PadFArgs {
        src: f,
        dst: fp.ptr(),
        g: p.rows as i64,
        total: (sh.r * sh.s * sh.c) as i64,
        real: p.real as i32,
        c_out: p.shape.c as i32,
        k: sh.k as i32,
        pad: 0,
    };
    let func = function(stream.context(), &CONV_SM90_AUX, "conv_sm90_pad_f")?;
    let mut l = stream.launch_builder(&func);
    l.arg(&fa);
    // SAFETY: f holds [R, S, C, K] = [R*S*C, K] (the caller's contract, 16-byte aligned:
    // checked by `plan`; the kernel reads no row past `total`); fp the padded filter's f_elems.
    unsafe { l.launch(grid((p.f_elems() / 8) as u64)) }.map_err(Error::driver("cuLaunchKernel(conv_sm90_pad_f)"))?;
    crate::launch::record::record("conv_sm90_pad", || {
        let fields =
            vec![("fold_rows", p.fold_rows as i64), ("fold_cols", p.fold_cols as i64), ("channels", p.shape.c as i64)];
        ("conv_sm90_pad_x".into(), fields)
    });
    // xp and fp are freed on the stream after the conv (Drop, stream-ordered).
    run(stream, dtype, (xp.ptr(), fp.ptr(), bias, out), &p.shape, epi, knobs)
}

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
    fn the_stem_folds_its_filter_rows_and_columns() {
        let e = Epilogue::default();
        let forms = plan(DType::BFloat16, &stem(32), (0, 0, 0, 0), &e, 2);
        assert_eq!(forms.len(), 3);
        let r = forms[0];
        assert_eq!((r.fold_rows, r.fold_cols, r.width), (2, 7, [2, 3, 1]));
        assert_eq!(
            (r.shape.h, r.shape.w, r.shape.c, r.shape.r, r.shape.s, r.shape.stride, r.shape.pad),
            (115, 112, 48, 4, 1, [1, 1], [0, 0])
        );
        assert_eq!((r.rows, r.real, r.k_steps(), r.seg, r.span(), r.smem()), (4, 42, 4, 112, 229, 2 * 690 * 2));
        assert_eq!((r.shape.p, r.shape.q, r.shape.m()), (112, 112, stem(32).m()));
        // about the copy of the columns fold: 115 rows of 48 channels against 224 of 24
        let f = forms[1];
        assert_eq!((f.fold_rows, f.fold_cols), (1, 7));
        assert_eq!(
            (f.shape.w, f.shape.c, f.shape.r, f.shape.s, f.shape.stride, f.shape.pad),
            (112, 24, 7, 1, [2, 1], [3, 0])
        );
        assert_eq!((f.rows, f.real, f.k_steps()), (7, 21, 7));
        assert!(r.x_elems() * 100 < f.x_elems() * 103);
        let p = forms[2];
        assert_eq!((p.fold_rows, p.fold_cols, p.width), (1, 1, [1, 0, 1]));
        assert_eq!((p.shape.c, p.shape.w, p.rows, p.real, p.k_steps()), (8, 224, 49, 3, 49));
        assert_eq!(p.shape.m(), stem(32).m());
        // the knob's levels
        let kinds = |fold| {
            plan(DType::BFloat16, &stem(2), (0, 0, 0, 0), &e, fold)
                .iter()
                .map(|p| (p.fold_rows, p.fold_cols))
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(1), [(1, 7), (1, 1)]);
        assert_eq!(kinds(0), [(1, 1)]);
    }

    #[test]
    fn rows_fold_only_where_it_saves_k_steps() {
        let e = Epilogue::default();
        // C = 12 3x3 stride 2: rows 2 * 36 = 72 channels, 2 k-steps x 2 rows, against 1 x 3
        let sh = Conv2dShape { c: 12, r: 3, s: 3, pad: [1, 1], p: 112, q: 112, ..stem(2) };
        let forms = plan(DType::BFloat16, &sh, (0, 0, 0, 0), &e, 2);
        assert_eq!(forms.iter().map(|p| (p.fold_rows, p.k_steps())).collect::<Vec<_>>(), [(1, 3), (2, 4), (1, 9)]);
        // stride 1 or dilated rows: nothing to fold
        let sh = Conv2dShape { stride: [1, 2], p: 224, ..stem(2) };
        let forms = plan(DType::BFloat16, &sh, (0, 0, 0, 0), &e, 2);
        assert!(!forms.is_empty() && forms.iter().all(|p| p.fold_rows == 1));
        let sh = Conv2dShape { dil: [2, 1], p: 109, ..stem(2) };
        let forms = plan(DType::BFloat16, &sh, (0, 0, 0, 0), &e, 2);
        assert!(!forms.is_empty() && forms.iter().all(|p| p.fold_rows == 1));
        // degenerate shapes plan nothing, without overflowing
        let sh = Conv2dShape { r: 0, p: 0, ..stem(2) };
        assert!(plan(DType::BFloat16, &sh, (0, 0, 0, 0), &e, 2).iter().all(|p| p.fold_rows == 1));
        let sh = Conv2dShape { c: usize::MAX - 2, ..stem(2) };
        assert!(plan(DType::BFloat16, &sh, (0, 0, 0, 0), &e, 2).is_empty());
        // stride 3 over 5 rows: 2 folded rows, the last one's third input row past the filter
        let sh = Conv2dShape { c: 5, r: 5, s: 3, stride: [3, 2], pad: [2, 1], p: 5, q: 6, h: 16, w: 13, ..stem(2) };
        let r = plan(DType::Float16, &sh, (0, 0, 0, 0), &e, 2)[0];
        assert_eq!((r.fold_rows, r.rows, r.real, r.shape.c, r.shape.h, r.k_steps()), (3, 2, 45, 48, 6, 2));
    }

    #[test]
    fn the_copy_units_fit_their_shared_memory() {
        // C = 7, 3 columns of stride 1 over a 4000-wide row: 32 KB holds 2340 pixels of 7
        // channels and 3 words, so units of 2338 output pixels
        let sh = Conv2dShape { h: 4, w: 4000, c: 7, r: 3, s: 3, stride: [1, 1], pad: [1, 1], p: 4, q: 4000, ..stem(1) };
        for p in plan(DType::BFloat16, &sh, (0, 0, 0, 0), &Epilogue::default(), 2) {
            assert!(p.seg >= 1);
            assert!(p.smem() <= SPAN_SMEM, "{p:?}");
            // the next larger unit would not fit (within the 3 words of lead allowed for)
            let next = span(p.seg + 1, p.width[0], p.fold_cols, p.width[2]) * sh.c + 3;
            assert!(p.fold_rows * next * 2 > SPAN_SMEM || p.seg == p.shape.w, "{p:?}");
        }
        assert_eq!(seg_for(4000, 1, 7, [1, 1, 1], 3), 2338);
        // a pixel span wider than the budget: no unit fits
        assert_eq!(seg_for(10, 1, 8191, [1, 0, 1], 3), 0);
    }

    #[test]
    fn wide_filters_keep_the_plain_form() {
        // S * C = 3 * 45 = 135 -> 136 channels: 3 taps x 3 k-steps, no fewer than 9 x 1, for a
        // larger copy; the rows fold takes 2 x 5
        let sh = Conv2dShape { c: 45, r: 3, s: 3, ..stem(2) };
        let forms = plan(DType::Float16, &sh, (0, 0, 0, 0), &Epilogue::default(), 2);
        assert_eq!(
            forms.iter().map(|p| (p.fold_rows, p.fold_cols, p.shape.c, p.k_steps())).collect::<Vec<_>>(),
            [(1, 1, 48, 9), (1, 3, 136, 9), (2, 3, 272, 10)]
        );
        // 1 x 1 filters have nothing to fold
        let sh = Conv2dShape { c: 5, r: 1, s: 1, pad: [0, 0], p: 224, q: 224, stride: [1, 1], ..stem(2) };
        let forms = plan(DType::BFloat16, &sh, (0, 0, 0, 0), &Epilogue::default(), 2);
        assert_eq!(forms.iter().map(|p| (p.fold_cols, p.shape.c)).collect::<Vec<_>>(), [(1, 8)]);
    }

    #[test]
    fn misaligned_filters_and_f32_are_refused() {
        let e = Epilogue::default();
        assert!(plan(DType::BFloat16, &stem(1), (0, 8, 0, 0), &e, 2).is_empty());
        assert!(plan(DType::Float32, &stem(1), (0, 0, 0, 0), &e, 2).is_empty());
    }
}
