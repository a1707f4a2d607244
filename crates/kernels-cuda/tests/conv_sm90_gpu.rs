//! The Hopper implicit-GEMM conv2d (launch/conv_sm90.rs) on a GPU against a host f64 reference:
//! every epilogue part (the conv's own bias, the epilogue's bias, each activation, the clamp,
//! the residual with several betas), for bf16 and f16, on shapes with partial row and column
//! tiles, channel slices past C, stride, dilation and asymmetric padding; guard bytes around the
//! output (no write past a partial tile) and an output, biases and residual only 4-byte aligned;
//! also channel counts that are not a multiple of 8 (padded copies, folded and plain), every
//! split-K count with each tile width and small persistent grids, and the residual prefetch
//! (16-byte aligned residuals) on and off, the residual read as 16-byte vectors or in the
//! fragments, and launches under programmatic stream serialization. Skips without an sm_90a
//! GPU (or without libnvrtc); MAX_REQUIRE_GPU=1 turns a skip into a failure.

mod common;

use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use max_graph::DType;
use max_kernels_cuda::launch::conv_sm90::{self, Conv2dShape, Knobs, Outcome};
use max_kernels_cuda::launch::epilogue::{Act, Epilogue};

use common::{Rng, act, f16_value};

/// The shared test context, when its GPU is sm_90a.
fn context() -> Option<Arc<CudaContext>> {
    static CTX: OnceLock<Option<Arc<CudaContext>>> = OnceLock::new();
    CTX.get_or_init(|| {
        let ctx = common::context()?;
        match max_kernels_cuda::arch_name(&ctx) {
            Ok(a) if a == "sm_90a" => Some(ctx),
            Ok(a) => common::skip(&format!("the kernel needs sm_90a, the GPU is {a}")),
            Err(e) => common::skip(&format!("{e}")),
        }
    })
    .clone()
}

/// The 16-bit pattern of `x` (rounded to nearest even) and its exact value.
fn encode(dtype: DType, x: f32) -> (u16, f64) {
    if dtype == DType::BFloat16 {
        let b = x.to_bits();
        let h = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
        return (h, f32::from_bits((h as u32) << 16) as f64);
    }
    // |x| < 4 here: normal f16 values, or zero
    let v = (x as f64 * 1024.0).round() / 1024.0;
    let h = half_bits(v);
    (h, f16_value(h))
}

fn half_bits(v: f64) -> u16 {
    if v == 0.0 {
        return 0;
    }
    let sign = if v < 0.0 { 0x8000 } else { 0 };
    let a = v.abs();
    let e = a.log2().floor() as i32;
    let m = ((a / 2f64.powi(e) - 1.0) * 1024.0).round() as u16;
    sign | (((e + 15) as u16) << 10) | m
}

fn value(dtype: DType, h: u16) -> f64 {
    if dtype == DType::BFloat16 { f32::from_bits((h as u32) << 16) as f64 } else { f16_value(h) }
}

/// Device data with `GUARD` bytes of 0x7F before and after; the pointer is `GUARD` bytes in, so
/// only 4-byte aligned when GUARD is.
const GUARD: usize = 36;

struct Dev {
    host: Vec<f64>,
    buf: CudaSlice<u8>,
}

impl Dev {
    fn random(s: &Arc<CudaStream>, dtype: DType, len: usize, guard: usize, rng: &mut Rng) -> Dev {
        let mut bytes = vec![0x7Fu8; guard];
        let mut host = Vec::with_capacity(len);
        for _ in 0..len {
            let (h, v) = encode(dtype, rng.unit());
            bytes.extend_from_slice(&h.to_le_bytes());
            host.push(v);
        }
        bytes.resize(bytes.len() + guard, 0x7F);
        let buf = s.clone_htod(&bytes).unwrap_or_else(|e| panic!("upload: {e}"));
        Dev { host, buf }
    }
    fn ptr(&self, s: &Arc<CudaStream>, guard: usize) -> u64 {
        self.buf.device_ptr(s).0 + guard as u64
    }
}

const ACTS: [Act; 7] = [Act::None, Act::Relu, Act::Gelu, Act::GeluTanh, Act::Silu, Act::Sigmoid, Act::GeluQuick];

#[allow(clippy::too_many_arguments)]
fn shape(
    n: usize,
    hw: [usize; 2],
    c: usize,
    k: usize,
    rs: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 4],
    dil: [usize; 2],
) -> Conv2dShape {
    let out = |i: usize| (hw[i] + pad[2 * i] + pad[2 * i + 1] - dil[i] * (rs[i] - 1) - 1) / stride[i] + 1;
    Conv2dShape {
        n,
        h: hw[0],
        w: hw[1],
        c,
        k,
        r: rs[0],
        s: rs[1],
        p: out(0),
        q: out(1),
        stride,
        pad: [pad[0], pad[2]],
        dil,
    }
}

/// Runs one conv with the conv's own bias (when `conv_bias`), the epilogue's bias, `a`, the
/// clamp to [-0.75, 0.5] (when `clamp`) and (when beta is given) the residual, and checks every
/// output.
#[allow(clippy::too_many_arguments)]
fn check(
    s: &Arc<CudaStream>,
    dtype: DType,
    sh: &Conv2dShape,
    a: Act,
    beta: Option<f32>,
    conv_bias: bool,
    clamp: bool,
    rng: &mut Rng,
) {
    check_with(s, dtype, sh, (a, beta, conv_bias, clamp), &Knobs::default(), GUARD, rng);
}

/// `check` with the launcher's knobs, the biases, residual and output `guard` bytes into their
/// allocations (16: 16-byte aligned, so the prefetch and the staged epilogue may run).
fn check_with(
    s: &Arc<CudaStream>,
    dtype: DType,
    sh: &Conv2dShape,
    (a, beta, conv_bias, clamp): (Act, Option<f32>, bool, bool),
    knobs: &Knobs,
    guard: usize,
    rng: &mut Rng,
) {
    let what = format!("{dtype} {sh:?} {a:?} beta={beta:?} conv_bias={conv_bias} clamp={clamp} {knobs:?}");
    let (m, k) = (sh.m(), sh.k);
    let x = Dev::random(s, dtype, sh.n * sh.h * sh.w * sh.c, 16, rng);
    let f = Dev::random(s, dtype, sh.r * sh.s * sh.c * k, 16, rng);
    let bias = Dev::random(s, dtype, k, guard, rng);
    let cbias = Dev::random(s, dtype, k, guard, rng);
    let res = Dev::random(s, dtype, m * k, guard, rng);
    let out = s.clone_htod(&vec![0x7Fu8; m * k * 2 + 2 * guard]).unwrap_or_else(|e| panic!("{e}"));
    let mut epi = Epilogue::new(Some(bias.ptr(s, guard)), a, beta.map(|_| res.ptr(s, guard)));
    if let Some(b) = beta {
        epi = epi.with_beta(b);
    }
    if clamp {
        epi = epi.with_clamp(-0.75, 0.5);
    }
    let cb = if conv_bias { cbias.ptr(s, guard) } else { 0 };
    let ptrs = (x.ptr(s, 16), f.ptr(s, 16), cb, out.device_ptr(s).0 + guard as u64);
    let ran = conv_sm90::conv2d_with(s, dtype, ptrs, sh, &epi, knobs).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(ran, Outcome::Ran, "{what}");
    s.synchronize().unwrap_or_else(|e| panic!("{what}: {e}"));
    let bytes = s.clone_dtoh(&out).unwrap_or_else(|e| panic!("{e}"));
    let (head, body, tail) = (&bytes[..guard], &bytes[guard..guard + m * k * 2], &bytes[guard + m * k * 2..]);
    assert!(head.iter().chain(tail).all(|&b| b == 0x7F), "{what}: wrote outside the output");
    let eps = if dtype == DType::BFloat16 { 2f64.powi(-8) } else { 2f64.powi(-11) };
    for row in 0..m {
        let (img, pix) = (row / (sh.p * sh.q), row % (sh.p * sh.q));
        let (oy, ox) = (pix / sh.q, pix % sh.q);
        for col in 0..k {
            let (mut acc, mut mag) = (bias.host[col], bias.host[col].abs());
            if conv_bias {
                acc += cbias.host[col];
                mag += cbias.host[col].abs();
            }
            for r in 0..sh.r {
                for t in 0..sh.s {
                    let iy = (oy * sh.stride[0] + r * sh.dil[0]) as isize - sh.pad[0] as isize;
                    let ix = (ox * sh.stride[1] + t * sh.dil[1]) as isize - sh.pad[1] as isize;
                    if iy < 0 || ix < 0 || iy >= sh.h as isize || ix >= sh.w as isize {
                        continue;
                    }
                    let xb = ((img * sh.h + iy as usize) * sh.w + ix as usize) * sh.c;
                    let fb = (r * sh.s + t) * sh.c * k + col;
                    for c in 0..sh.c {
                        let p = x.host[xb + c] * f.host[fb + c * k];
                        acc += p;
                        mag += p.abs();
                    }
                }
            }
            let mut want = act(a, acc);
            if clamp {
                want = want.clamp(-0.75, 0.5);
            }
            // The lean epilogue may round the activation's output to the element type before
            // adding the residual on pairs of it (the packed form): one more rounding of each
            // addend.
            let mut addends = want.abs();
            if let Some(b) = beta {
                let r = b as f64 * res.host[row * k + col];
                want += r;
                addends += r.abs();
            }
            let i = row * k + col;
            let got = value(dtype, u16::from_le_bytes([body[2 * i], body[2 * i + 1]]));
            let tol = eps * (want.abs() + addends + 1.0) + 1e-5 * mag;
            assert!((got - want).abs() <= tol, "{what}: out[{row}][{col}] = {got}, expected {want} (tolerance {tol})");
        }
    }
}

#[test]
fn epilogue_parts_against_the_host() {
    let Some(ctx) = context() else { return };
    let s = ctx.new_stream().unwrap_or_else(|e| panic!("cuStreamCreate: {e}"));
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let shapes = [
        // 3 row tiles (the last partial), one column tile, 2 channel slices (the second partial)
        shape(2, [9, 11], 72, 64, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        // K = 40 below the tile width, C = 24, stride 2, dilation 2, asymmetric padding
        shape(3, [13, 10], 24, 40, [3, 3], [2, 2], [2, 1, 0, 2], [2, 2]),
        // 1x1 with K = 328: several column tiles, the last one partial
        shape(1, [7, 9], 136, 328, [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
    ];
    let mut i = 0;
    for dtype in [DType::BFloat16, DType::Float16] {
        for sh in &shapes {
            for a in ACTS {
                let beta = [None, Some(1.0), Some(0.5), Some(-2.0)][i % 4];
                check(&s, dtype, sh, a, beta, i % 3 == 1, i % 5 == 2, &mut rng);
                i += 1;
            }
        }
    }
}

#[test]
fn unsuitable_problems_launch_nothing() {
    let Some(ctx) = context() else { return };
    let s = ctx.new_stream().unwrap_or_else(|e| panic!("cuStreamCreate: {e}"));
    // K = 62: not a multiple of 8, padded input channels or not
    for c in [64, 3] {
        let sh = shape(1, [8, 8], c, 62, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]);
        let got = conv_sm90::conv2d(&s, DType::BFloat16, (256, 256, 0, 256), &sh, &Epilogue::default());
        assert!(matches!(got, Ok(Outcome::NotEligible(_))), "{got:?}");
    }
}

#[test]
fn padded_channels_against_the_host() {
    let Some(ctx) = context() else { return };
    let s = ctx.new_stream().unwrap_or_else(|e| panic!("cuStreamCreate: {e}"));
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let shapes = [
        // the ResNet stem on a small image: C = 3, 7x7, stride 2, padding 3
        shape(2, [19, 17], 3, 64, [7, 7], [2, 2], [3, 3, 3, 3], [1, 1]),
        // C = 5, K = 40, dilation 2, asymmetric padding
        shape(2, [11, 13], 5, 40, [3, 3], [1, 1], [2, 1, 0, 2], [2, 2]),
        // C = 1, 5x2 filter, stride (1, 3)
        shape(3, [10, 14], 1, 16, [5, 2], [1, 3], [2, 2, 0, 1], [1, 1]),
        // C = 5, 5x3 filter, stride (3, 2), asymmetric padding: three rows folded, the last
        // folded row group partly past the filter
        shape(2, [16, 13], 5, 24, [5, 3], [3, 2], [2, 1, 1, 0], [1, 1]),
        // C = 13 1x1 (nothing to fold), K = 328
        shape(1, [7, 9], 13, 328, [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        // C = 45 3x3: folding saves no k-steps
        shape(1, [6, 7], 45, 64, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
    ];
    let mut i = 0;
    for dtype in [DType::BFloat16, DType::Float16] {
        for sh in &shapes {
            for fold in [None, Some(1), Some(0)] {
                let knobs = Knobs { fold, ..Knobs::default() };
                let a = ACTS[i % ACTS.len()];
                let beta = [None, Some(1.0), Some(0.5), Some(-2.0)][i % 4];
                check_with(&s, dtype, sh, (a, beta, i % 3 == 1, i % 5 == 2), &knobs, GUARD, &mut rng);
                i += 1;
            }
        }
    }
}

#[test]
fn split_k_against_the_host() {
    let Some(ctx) = context() else { return };
    let s = ctx.new_stream().unwrap_or_else(|e| panic!("cuStreamCreate: {e}"));
    let mut rng = Rng(0x6A09_E667_F3BC_C908);
    let shapes = [
        // 7x7 output, C = 256, K = 128: one row tile (partial), 36 k-steps
        shape(1, [7, 7], 256, 128, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        // 2 row tiles, 3 column tiles of 64 (the last partial), 18 k-steps with partial slices
        shape(2, [9, 11], 72, 136, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        // a padded, folded stem: 7 k-steps
        shape(1, [17, 15], 3, 64, [7, 7], [2, 2], [3, 3, 3, 3], [1, 1]),
    ];
    let mut i = 0;
    for sh in &shapes {
        for splits in [1, 2, 3, 5, 7, 100] {
            for (bn, grid) in [(None, None), (Some(64), Some(3)), (Some(128), None), (Some(256), Some(1))] {
                let dtype = [DType::BFloat16, DType::Float16][i % 2];
                // Every third launch under programmatic stream serialization.
                let pingpong = Some((i / 2) % 2 == 1);
                let knobs = Knobs { bn, grid, splits: Some(splits), pdl: i % 3 == 0, pingpong, ..Knobs::default() };
                let a = ACTS[i % ACTS.len()];
                let beta = [None, Some(1.0), Some(0.5), Some(-2.0)][i % 4];
                check_with(&s, dtype, sh, (a, beta, i % 3 == 1, i % 5 == 2), &knobs, GUARD, &mut rng);
                i += 1;
            }
        }
    }
}

#[test]
fn tiled_a_against_the_host() {
    let Some(ctx) = context() else { return };
    let s = ctx.new_stream().unwrap_or_else(|e| panic!("cuStreamCreate: {e}"));
    let mut rng = Rng(0xA54F_F53A_5F1D_36F1);
    let shapes = [
        // 1x1, stride 1, no padding: x read as [M, C] (partial row tiles, channel slices, columns)
        shape(2, [9, 11], 72, 200, [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        shape(3, [7, 11], 64, 128, [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        shape(1, [7, 9], 136, 328, [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        shape(1, [5, 7], 13, 24, [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        // not eligible (stride 2; padding): the im2col map as before
        shape(2, [15, 13], 64, 64, [1, 1], [2, 2], [0, 0, 0, 0], [1, 1]),
        shape(2, [6, 7], 32, 64, [1, 1], [1, 1], [1, 0, 0, 1], [1, 1]),
    ];
    let mut i = 0;
    for dtype in [DType::BFloat16, DType::Float16] {
        for sh in &shapes {
            for (splits, bn) in [(Some(1), None), (Some(3), Some(128)), (None, Some(64))] {
                let pingpong = Some((i / 3) % 2 == 0);
                let knobs = Knobs { splits, bn, tiled_a: true, pingpong, ..Knobs::default() };
                let beta = [None, Some(1.0), Some(0.5), Some(-2.0)][i % 4];
                check_with(&s, dtype, sh, (ACTS[i % ACTS.len()], beta, i % 3 == 1, i % 5 == 2), &knobs, 16, &mut rng);
                i += 1;
            }
        }
    }
}

#[test]
fn residual_prefetch_against_the_host() {
    let Some(ctx) = context() else { return };
    let s = ctx.new_stream().unwrap_or_else(|e| panic!("cuStreamCreate: {e}"));
    let mut rng = Rng(0xBB67_AE85_84CA_A73B);
    let shapes = [
        shape(2, [9, 11], 72, 200, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        shape(3, [7, 11], 64, 128, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        shape(2, [16, 16], 64, 256, [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
    ];
    let mut i = 0;
    for sh in &shapes {
        for (no_prefetch, no_res_vec) in [(false, false), (true, false), (false, true)] {
            for (bn, grid) in [(None, None), (Some(64), Some(2)), (Some(256), Some(1))] {
                let dtype = [DType::BFloat16, DType::Float16][i % 2];
                let pingpong = Some((i / 2) % 2 == 0);
                let knobs = Knobs { bn, grid, splits: Some(1), no_prefetch, no_res_vec, pingpong, ..Knobs::default() };
                let beta = [Some(1.0), Some(0.5), Some(-2.0)][i % 3];
                check_with(&s, dtype, sh, (ACTS[i % 3], beta, i % 2 == 0, i % 4 == 1), &knobs, 16, &mut rng);
                i += 1;
            }
        }
    }
}

#[test]
fn pingpong_and_wide_tiles_against_the_host() {
    let Some(ctx) = context() else { return };
    let s = ctx.new_stream().unwrap_or_else(|e| panic!("cuStreamCreate: {e}"));
    let mut rng = Rng(0x510E_527F_ADE6_82D1);
    let shapes = [
        // 7 row tiles x 3 column tiles of 64 (the last partial): odd unit counts per block
        shape(2, [21, 20], 72, 136, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        // 1x1 through the tiled map, partial last row tile
        shape(3, [15, 13], 64, 128, [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        // strided, dilated, one 64-channel slice
        shape(2, [17, 19], 16, 64, [3, 3], [2, 2], [2, 1, 0, 2], [2, 2]),
    ];
    let mut i = 0;
    for sh in &shapes {
        for (bn, grid, splits) in [
            (Some(64), Some(1), 1),
            (Some(64), Some(3), 1),
            (Some(128), Some(2), 1),
            (Some(128), Some(5), 2),
            (None, None, 1),
        ] {
            for (dtype, rows) in
                [(DType::BFloat16, 128), (DType::Float16, 128), (DType::BFloat16, 256), (DType::Float16, 192)]
            {
                // Ping-pong, or tiles of 256 or 192 rows (which take precedence; 192 only 128 wide)
                let knobs = Knobs {
                    bn,
                    grid,
                    splits: Some(splits),
                    pingpong: Some(true),
                    rows: Some(rows),
                    ..Knobs::default()
                };
                let beta = [None, Some(1.0), Some(0.5), Some(-2.0)][i % 4];
                check_with(&s, dtype, sh, (ACTS[i % ACTS.len()], beta, i % 3 == 1, i % 5 == 2), &knobs, 16, &mut rng);
                check_with(
                    &s,
                    dtype,
                    sh,
                    (ACTS[(i + 1) % ACTS.len()], beta, i % 3 == 0, i % 5 == 1),
                    &knobs,
                    GUARD,
                    &mut rng,
                );
                i += 1;
            }
        }
    }
}
