//! The f64 functions of the float unary ops, written without branches or table lookups so a
//! loop over them vectorises, and the CPU dispatch that compiles such loops for AVX2 and
//! AVX-512.
//!
//! `exp` reduces to e^r on |r| <= ln2/2 (Cody-Waite) with a degree-13 Taylor polynomial;
//! `tanh` is Cephes' (a rational function below 0.625, 1 - 2/(e^2x + 1) above); `erf` is
//! msun's s_erf.c, its branches selected per lane (the costly one, 1.25 <= |x| < 6, computed
//! only for the lanes that need it, gathered). All are within an ulp or two of libm's f64
//! results (the tests check), so a result rounded to float32 or narrower is libm's but for an
//! f64 result within an ulp of a rounding boundary (about one in 2^28).

// The coefficients are Cephes' and msun's, digit for digit.
#![allow(clippy::excessive_precision)]

use max_graph::attrs::Attrs;
use max_graph::ops::{Op, OpKind};

/// Defines `fn $name(args) -> ret` running `$body`, compiled again for AVX2 and for AVX-512 (both
/// with FMA) and dispatched at run time on x86-64 (everything `$body` calls must be
/// `#[inline(always)]` to be compiled for them as well). All give the same results: Rust never
/// contracts a * b + c into a fused multiply-add, and `mul_add` is fused everywhere (a libm
/// call without FMA).
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $r:ty $body:block) => {
        $(#[$m])*
        $vis fn $name($($a: $t),*) -> $r {
            #[inline(always)]
            fn body($($a: $t),*) -> $r $body
            #[cfg(target_arch = "x86_64")]
            {
                let isa = $crate::cpu::elementwise::vmath::MAX_ISA.load(std::sync::atomic::Ordering::Relaxed);
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,fma")]
                unsafe fn avx512($($a: $t),*) -> $r {
                    body($($a),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($a: $t),*) -> $r {
                    body($($a),*)
                }
                if isa >= 2
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has these extensions.
                    return unsafe { avx512($($a),*) };
                }
                if isa >= 1 && std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has AVX2.
                    return unsafe { avx2($($a),*) };
                }
            }
            body($($a),*)
        }
    };
}
pub(crate) use multiversion;

/// The widest extension `multiversion!` functions use: 2 AVX-512, 1 AVX2, 0 the baseline (the
/// tests lower it to compare the versions).
pub(crate) static MAX_ISA: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);

/// 1.5 * 2^52: adding it rounds an f64 of magnitude below 2^51 to an integer, which the low
/// bits of the sum then hold.
const SHIFT: f64 = 6755399441055744.0;
const LN2_HI: f64 = 6.93147180369123816490e-01;
const LN2_LO: f64 = 1.90821492927058770002e-10;

/// e^x.
#[inline(always)]
pub fn exp(x: f64) -> f64 {
    // Beyond these e^x is inf or 0 (the scale below over- or underflows); NaN passes.
    let x = x.clamp(-745.2, 709.8);
    let t = x.mul_add(std::f64::consts::LOG2_E, SHIFT);
    let k = t - SHIFT;
    let r = (-k).mul_add(LN2_LO, (-k).mul_add(LN2_HI, x));
    // e^r = 1 + r + r^2 q(r), q(r) = 1/2! + r/3! + ... + r^11/13!: the Taylor series, to 4e-18,
    // with q evaluated by Estrin's scheme (a short dependency chain) in fused multiply-adds.
    const C: [f64; 12] = [
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
        1.0 / 40320.0,
        1.0 / 362880.0,
        1.0 / 3628800.0,
        1.0 / 39916800.0,
        1.0 / 479001600.0,
        1.0 / 6227020800.0,
    ];
    let r2 = r * r;
    let r4 = r2 * r2;
    let r8 = r4 * r4;
    let a = |i: usize| C[i + 1].mul_add(r, C[i]);
    let q = a(10).mul_add(r2, a(8)).mul_add(r8, a(6).mul_add(r2, a(4)).mul_add(r4, a(2).mul_add(r2, a(0))));
    let er = 1.0 + r2.mul_add(q, r);
    // 2^k as two factors (k is in [-1075, 1024]) so neither leaves the normal range.
    let ki = (t.to_bits() as i64).wrapping_sub(SHIFT.to_bits() as i64);
    let k1 = ki >> 1;
    let k2 = ki - k1;
    let s1 = f64::from_bits((k1.wrapping_add(1023) as u64) << 52);
    let s2 = f64::from_bits((k2.wrapping_add(1023) as u64) << 52);
    er * s1 * s2
}

/// tanh(x).
#[inline(always)]
pub fn tanh(x: f64) -> f64 {
    const P0: f64 = -9.64399179425052238628e-1;
    const P1: f64 = -9.92877231001918586564e1;
    const P2: f64 = -1.61468768441708447952e3;
    const Q0: f64 = 1.12811678491632931402e2;
    const Q1: f64 = 2.23548839060100448583e3;
    const Q2: f64 = 4.84406305325125486048e3;
    let z = x.abs();
    let s = x * x;
    let big = z > 0.625;
    // One division for both: s P(s) / Q(s) below 0.625, 2 / (e^2z + 1) above.
    let num = if big { 2.0 } else { s * ((P0 * s + P1) * s + P2) };
    let den = if big { exp(2.0 * z) + 1.0 } else { ((s + Q0) * s + Q1) * s + Q2 };
    let q = num / den;
    if big {
        (1.0 - q).copysign(x)
    } else if x == 0.0 {
        x
    } else {
        x + x * q
    }
}

/// 1 / (1 + e^-x), as 1 / (1 + e^-|x|) or e^-|x| / (1 + e^-|x|) so nothing overflows.
#[inline(always)]
pub fn sigmoid(x: f64) -> f64 {
    let e = exp(-x.abs());
    if x >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) }
}

// msun's s_erf.c coefficients.
const ERX: f64 = 8.45062911510467529297e-01;
const EFX8: f64 = 1.02703333676410069053e+00;
const PP: [f64; 5] = [
    1.28379167095512558561e-01,
    -3.25042107247001499370e-01,
    -2.84817495755985104766e-02,
    -5.77027029648944159157e-03,
    -2.37630166566501626084e-05,
];
const QQ: [f64; 6] = [
    1.0,
    3.97917223959155352819e-01,
    6.50222499887672944485e-02,
    5.08130628187576562776e-03,
    1.32494738004321644526e-04,
    -3.96022827877536812320e-06,
];
const PA: [f64; 7] = [
    -2.36211856075265944077e-03,
    4.14856118683748331666e-01,
    -3.72207876035701323847e-01,
    3.18346619901161753674e-01,
    -1.10894694282396677476e-01,
    3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
];
const QA: [f64; 7] = [
    1.0,
    1.06420880400844228286e-01,
    5.40397917702171048937e-01,
    7.18286544141962662868e-02,
    1.26171219808761642112e-01,
    1.36370839120290507362e-02,
    1.19844998467991074170e-02,
];
// [1.25, 1/0.35) and [1/0.35, 6): R of degree 7 and S of degree 8 (zero-padded for the
// second range, which leaves its Horner evaluation unchanged).
const RA: [f64; 8] = [
    -9.86494403484714822705e-03,
    -6.93858572707181764372e-01,
    -1.05586262253232909814e+01,
    -6.23753324503260060396e+01,
    -1.62396669462573470355e+02,
    -1.84605092906711035994e+02,
    -8.12874355063065934246e+01,
    -9.81432934416914548592e+00,
];
const SA: [f64; 9] = [
    1.0,
    1.96512716674392571292e+01,
    1.37657754143519042600e+02,
    4.34565877475229228821e+02,
    6.45387271733267880336e+02,
    4.29008140027567833386e+02,
    1.08635005541779435134e+02,
    6.57024977031928170135e+00,
    -6.04244152148580987438e-02,
];
const RB: [f64; 8] = [
    -9.86494292470009928597e-03,
    -7.99283237680523006574e-01,
    -1.77579549177547519889e+01,
    -1.60636384855821916062e+02,
    -6.37566443368389627722e+02,
    -1.02509513161107724954e+03,
    -4.83519191608651397019e+02,
    0.0,
];
const SB: [f64; 9] = [
    1.0,
    3.03380607434824582924e+01,
    3.25792512996573918826e+02,
    1.53672958608443695994e+03,
    3.19985821950859553908e+03,
    2.55305040643316442583e+03,
    4.74528541206955367215e+02,
    -2.24409524465858183362e+01,
    0.0,
];

/// `c` paired at `x`: [c0 + c1 x, c2 + c3 x, ...], a level of Estrin's scheme (M = N / 2
/// rounded up; an odd last coefficient is kept).
#[inline(always)]
fn pairs<const N: usize, const M: usize>(c: [f64; N], x: f64) -> [f64; M] {
    let mut out = [0.0; M];
    for (i, o) in out.iter_mut().enumerate() {
        *o = if 2 * i + 1 < N { c[2 * i] + c[2 * i + 1] * x } else { c[2 * i] };
    }
    out
}

/// c0 + c1 x + ... + c6 x^6 by Estrin's scheme.
#[inline(always)]
fn estrin7(c: [f64; 7], x: f64) -> f64 {
    let x2 = x * x;
    let [a, b]: [f64; 2] = pairs(pairs::<7, 4>(c, x), x2);
    a + b * (x2 * x2)
}

/// Whether erf(x) needs `erf_far`: 1.25 <= |x| < 6.
#[inline(always)]
fn is_far(x: f64) -> bool {
    let ax = x.abs();
    (1.25..6.0).contains(&ax)
}

/// erf(x) for x not `is_far` (NaN included): x + x P(x^2) / Q(x^2) below 0.84375,
/// 1 - ((1 - erx) - P(|x| - 1) / Q(|x| - 1)) below 1.25 (one division for both), 1 from 6.
#[inline(always)]
fn erf_near(x: f64) -> f64 {
    let ax = x.abs();
    let tiny = 0.125 * (8.0 * x + EFX8 * x);
    let below = ax < 0.84375;
    let z = x * x;
    let s = ax - 1.0;
    // The small range's polynomials padded to the mid range's degree, coefficients selected.
    let t = if below { z } else { s };
    let pick =
        |p: &[f64], a: &[f64; 7]| std::array::from_fn(|i| if below { p.get(i).copied().unwrap_or(0.0) } else { a[i] });
    let q = estrin7(pick(&PP, &PA), t) / estrin7(pick(&QQ, &QA), t);
    let small = x + x * q;
    let big = if ax < 1.25 { 1.0 - ((1.0 - ERX) - q) } else { 1.0 - f64::from_bits(0x0010_0000_0000_0000) };
    if ax < 2f64.powi(-28) {
        tiny
    } else if below {
        small
    } else if x.is_nan() {
        x
    } else {
        big.copysign(x)
    }
}

/// erf(x) for 1.25 <= |x| < 6: 1 - e^(-x^2 - 0.5625 + R(1/x^2) / S(1/x^2)) / |x|, two sets of
/// R and S (selected per lane; the second zero-padded, which leaves its Horner evaluation as it
/// is), e^-x^2 as e^-z^2 e^((z-x)(z+x)) with z = x's top 21 bits so z^2 is exact.
#[inline(always)]
fn erf_far(x: f64) -> f64 {
    let ax = x.abs();
    let s = 1.0 / (ax * ax);
    let near = ax < f64::from_bits(0x4006_db6d_0000_0000);
    let mut r = if near { RA[7] } else { RB[7] };
    let mut q = if near { SA[8] } else { SB[8] };
    for i in (0..8).rev() {
        if i < 7 {
            r = (if near { RA[i] } else { RB[i] }) + s * r;
        }
        q = (if near { SA[i] } else { SB[i] }) + s * q;
    }
    let zl = f64::from_bits(ax.to_bits() & 0xFFFF_FFFF_0000_0000);
    let y = 1.0 - exp(-zl * zl - 0.5625) * exp((zl - ax) * (zl + ax) + r / q) / ax;
    y.copysign(x)
}

/// erf(x): msun's algorithm (the libm crate's erf, the reference), its branches selected.
#[cfg(test)]
pub fn erf(x: f64) -> f64 {
    if is_far(x) { erf_far(x) } else { erf_near(x) }
}

/// `y[i] = erf(a[i])` for up to BLOCK values: `erf_near` for all, `erf_far` only for the lanes
/// that need it, gathered (for activations most values are below 1.25).
#[inline(always)]
fn erf_block(a: &[f64], y: &mut [f64]) {
    for (y, &a) in y.iter_mut().zip(a) {
        *y = erf_near(a);
    }
    let mut idx = [0u16; BLOCK];
    let mut count = 0;
    for (i, &a) in a.iter().enumerate().take(BLOCK) {
        idx[count] = i as u16;
        count += is_far(a) as usize;
    }
    if count == 0 {
        return;
    }
    let (mut fx, mut fy) = ([0.0; BLOCK], [0.0; BLOCK]);
    for (f, &i) in fx.iter_mut().zip(&idx[..count]) {
        *f = a[i as usize];
    }
    for (f, &x) in fy[..count].iter_mut().zip(&fx[..count]) {
        *f = erf_far(x);
    }
    for (&f, &i) in fy.iter().zip(&idx[..count]) {
        y[i as usize] = f;
    }
}

const BLOCK: usize = 256;

/// `dst[i] = C::from(post(x, erf(arg(x))))` with `x = C::to(src[i])`, through `erf_block`.
#[inline(always)]
fn map_erf<S: Copy, D, C: Conv<S, D>>(
    src: &[S],
    dst: &mut [D],
    arg: impl Fn(f64) -> f64,
    post: impl Fn(f64, f64) -> f64,
) {
    for (s, d) in src.chunks(BLOCK).zip(dst.chunks_mut(BLOCK)) {
        let (mut xs, mut args, mut ys) = ([0.0; BLOCK], [0.0; BLOCK], [0.0; BLOCK]);
        let n = s.len().min(d.len());
        for ((x, a), &s) in xs.iter_mut().zip(&mut args).zip(s) {
            *x = C::to(s);
            *a = arg(*x);
        }
        erf_block(&args[..n], &mut ys[..n]);
        for ((d, &x), &y) in d.iter_mut().zip(&xs).zip(&ys) {
            *d = C::from(post(x, y));
        }
    }
}

/// The f64 function of a float unary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unary {
    Exp,
    Log,
    Log1p,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Acos,
    Atanh,
    Erf,
    Sigmoid,
    Silu,
    Gelu,
    GeluTanh,
    GeluQuick,
    /// A kind without a float meaning (gives NaN).
    Nan,
}

impl Unary {
    /// The function of `op` when it is one of the ops computed in f64 through a function.
    pub fn of(op: &Op) -> Option<Unary> {
        use OpKind::*;
        Some(match op.kind {
            Exp => Unary::Exp,
            Log => Unary::Log,
            Log1p => Unary::Log1p,
            Sqrt => Unary::Sqrt,
            Rsqrt => Unary::Rsqrt,
            Sin => Unary::Sin,
            Cos => Unary::Cos,
            Tanh => Unary::Tanh,
            Acos => Unary::Acos,
            Atanh => Unary::Atanh,
            Erf => Unary::Erf,
            Sigmoid => Unary::Sigmoid,
            Silu => Unary::Silu,
            Gelu => match gelu_mode(&op.attrs) {
                "tanh" => Unary::GeluTanh,
                "quick" => Unary::GeluQuick,
                _ => Unary::Gelu,
            },
            _ => return None,
        })
    }
}

fn gelu_mode(attrs: &Attrs) -> &str {
    match attrs.get("approximate") {
        Some(max_graph::Attr::Str(s)) => s.as_str(),
        _ => "none",
    }
}

/// How values of the lanes go to and from the f64 of the functions (a trait with inlined
/// methods rather than closures, which the compiler may leave as calls in the loops).
pub trait Conv<S, D> {
    fn to(s: S) -> f64;
    fn from(v: f64) -> D;
}

/// f64 lanes.
pub struct Same;

impl Conv<f64, f64> for Same {
    #[inline(always)]
    fn to(s: f64) -> f64 {
        s
    }
    #[inline(always)]
    fn from(v: f64) -> f64 {
        v
    }
}

/// `dst[i] = C::from(f(C::to(src[i])))` for the function of `u`, one loop per function.
#[inline(always)]
pub fn map_unary<S: Copy, D, C: Conv<S, D>>(u: Unary, src: &[S], dst: &mut [D]) {
    macro_rules! go {
        (|$x:ident| $e:expr) => {
            for (d, &s) in dst.iter_mut().zip(src) {
                let $x = C::to(s);
                *d = C::from($e);
            }
        };
    }
    let c = (2.0 / std::f64::consts::PI).sqrt();
    match u {
        Unary::Exp => go!(|x| exp(x)),
        Unary::Log => go!(|x| x.ln()),
        Unary::Log1p => go!(|x| x.ln_1p()),
        Unary::Sqrt => go!(|x| x.sqrt()),
        Unary::Rsqrt => go!(|x| 1.0 / x.sqrt()),
        Unary::Sin => go!(|x| x.sin()),
        Unary::Cos => go!(|x| x.cos()),
        Unary::Tanh => go!(|x| tanh(x)),
        Unary::Acos => go!(|x| x.acos()),
        Unary::Atanh => go!(|x| x.atanh()),
        Unary::Erf => map_erf::<S, D, C>(src, dst, |x| x, |_, e| e),
        Unary::Sigmoid => go!(|x| sigmoid(x)),
        Unary::Silu => go!(|x| x * sigmoid(x)),
        Unary::Gelu => map_erf::<S, D, C>(src, dst, |x| x / std::f64::consts::SQRT_2, |x, e| 0.5 * x * (1.0 + e)),
        Unary::GeluTanh => go!(|x| 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)))),
        Unary::GeluQuick => go!(|x| x * sigmoid(1.702 * x)),
        Unary::Nan => go!(|_x| f64::NAN),
    }
}
