//! The loops of single.rs: one op over a chunk of f32 (float) or u8 (bool, 0 or 1) values,
//! each operand a run of values or one value for the whole chunk. Everything here is
//! `#[inline(always)]` (and conversions are functions or traits, not closures passed around,
//! which the compiler may leave as calls) so it is compiled into each version of the chunk loop.

use super::conv::{Float, f64_to_f32_odd, quiet, round_bf16, round_f16};
use crate::cpu::elementwise::math::{fmax, fmin};
use crate::cpu::elementwise::vmath::{self, Unary};

/// An op with the kinds of its operands resolved (see single.rs's `code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// Float arithmetic in f32, rounded to the node's type: the same as rounding the f64
    /// result when the operands are of that type (f32 keeps at least 2p + 2 bits).
    Add,
    Sub,
    Mul,
    Div,
    Sqrt,
    /// Float arithmetic through f64, rounded to the node's type.
    Add64,
    Sub64,
    Mul64,
    Div64,
    FloorDiv,
    Mod,
    Pow,
    Unary(Unary),
    /// Float ops whose result is one of the operands, or exact.
    Max,
    Min,
    Abs,
    Neg,
    Relu,
    Floor,
    RoundEven,
    Trunc,
    /// A float cast, rounded to the node's type.
    Copy,
    Eq,
    Ne,
    Gt,
    Ge,
    IsNan,
    IsInf,
    /// A float cast to bool.
    NonZero,
    /// A bool cast to float.
    FromBool,
    And,
    Or,
    Xor,
    BoolEq,
    BoolGt,
    BoolGe,
    Not,
    BoolCopy,
    Where,
    BoolWhere,
}

/// One operand's values for a chunk.
#[derive(Clone, Copy, Debug)]
pub enum V<'a> {
    F(&'a [f32]),
    FS(f32),
    B(&'a [u8]),
    BS(u8),
}

/// Where a node's values go.
pub enum Out<'a> {
    F(&'a mut [f32]),
    B(&'a mut [u8]),
}

/// Operand values by index: a run of them or one for all.
pub trait At<T>: Copy {
    /// Whether there are at least `n` values.
    fn has(self, n: usize) -> bool;
    /// Value `i`.
    ///
    /// # Safety
    /// `has(n)` must hold for some `n > i`.
    unsafe fn at(self, i: usize) -> T;
}

impl<T: Copy> At<T> for &[T] {
    #[inline(always)]
    fn has(self, n: usize) -> bool {
        self.len() >= n
    }
    #[inline(always)]
    unsafe fn at(self, i: usize) -> T {
        // SAFETY: forwarded to the caller.
        unsafe { *self.get_unchecked(i) }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Splat<T>(pub T);

impl<T: Copy> At<T> for Splat<T> {
    #[inline(always)]
    fn has(self, _: usize) -> bool {
        true
    }
    #[inline(always)]
    unsafe fn at(self, _: usize) -> T {
        self.0
    }
}

#[inline(always)]
fn map1<T, D>(a: impl At<T>, out: &mut [D], f: impl Fn(T) -> D) -> bool {
    if !a.has(out.len()) {
        return false;
    }
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: i < out.len(), and a has that many values.
        *o = f(unsafe { a.at(i) });
    }
    true
}

#[inline(always)]
fn map2<T, U, D>(a: impl At<T>, b: impl At<U>, out: &mut [D], f: impl Fn(T, U) -> D) -> bool {
    if !(a.has(out.len()) && b.has(out.len())) {
        return false;
    }
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: i < out.len(), and a and b have that many values.
        *o = unsafe { f(a.at(i), b.at(i)) };
    }
    true
}

#[inline(always)]
fn map3<T, U, W, D>(a: impl At<T>, b: impl At<U>, c: impl At<W>, out: &mut [D], f: impl Fn(T, U, W) -> D) -> bool {
    if !(a.has(out.len()) && b.has(out.len()) && c.has(out.len())) {
        return false;
    }
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: i < out.len(), and a, b and c have that many values.
        *o = unsafe { f(a.at(i), b.at(i), c.at(i)) };
    }
    true
}

/// Runs `$body` with `$x` bound to the operand as an `At` of its kind (F: f32, B: u8).
macro_rules! operand {
    (F, $v:expr, $x:ident, $body:expr) => {
        match $v {
            V::F(s) => {
                let $x = s;
                $body
            }
            V::FS(c) => {
                let $x = Splat(c);
                $body
            }
            _ => false,
        }
    };
    (B, $v:expr, $x:ident, $body:expr) => {
        match $v {
            V::B(s) => {
                let $x = s;
                $body
            }
            V::BS(c) => {
                let $x = Splat(c);
                $body
            }
            _ => false,
        }
    };
}

macro_rules! un {
    ($k:tt, $args:expr, $out:expr, |$x:ident| $e:expr) => {
        operand!($k, $args[0], a, map1(a, $out, |$x| $e))
    };
}

macro_rules! bin {
    ($k:tt, $args:expr, $out:expr, |$x:ident, $y:ident| $e:expr) => {
        operand!($k, $args[0], a, operand!($k, $args[1], b, map2(a, b, $out, |$x, $y| $e)))
    };
}

/// How a node's float results are finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// Rounded to float32 (a float32 value of the group).
    F32,
    /// Rounded to float32, NaN made canonical (a float32 result, as storing it with the cast
    /// rules does).
    F32Out,
    Bf16,
    F16,
}

impl Round {
    pub fn of(f: Float, out: bool) -> Round {
        match f {
            Float::F32 if out => Round::F32Out,
            Float::F32 => Round::F32,
            Float::Bf16 => Round::Bf16,
            Float::F16 => Round::F16,
        }
    }
}

#[inline(always)]
fn same(x: f32) -> f32 {
    x
}

/// Runs `$body` with `$r` bound to the rounding of an f32 to the node's type.
macro_rules! rounded {
    ($rt:expr, $r:ident, $body:expr) => {
        match $rt {
            Round::F32 => {
                let $r = same;
                $body
            }
            Round::F32Out => {
                let $r = quiet;
                $body
            }
            Round::Bf16 => {
                let $r = round_bf16;
                $body
            }
            Round::F16 => {
                let $r = round_f16;
                $body
            }
        }
    };
}

/// Runs `$body` with `$r` bound to the finishing of an exact result (NaN made canonical for a
/// float32 result; the narrow types do that when stored).
macro_rules! finished {
    ($rt:expr, $r:ident, $body:expr) => {
        if $rt == Round::F32Out {
            let $r = quiet;
            $body
        } else {
            let $r = same;
            $body
        }
    };
}

#[inline(always)]
fn narrow_f32(v: f64) -> f32 {
    v as f32
}

#[inline(always)]
fn narrow_f32_out(v: f64) -> f32 {
    quiet(v as f32)
}

#[inline(always)]
fn narrow_bf16(v: f64) -> f32 {
    round_bf16(f64_to_f32_odd(v))
}

#[inline(always)]
fn narrow_f16(v: f64) -> f32 {
    round_f16(f64_to_f32_odd(v))
}

/// `vmath::Conv`s from f32 lanes, rounding to each `Round`.
macro_rules! conv {
    ($($name:ident: $narrow:ident),*) => {$(
        struct $name;
        impl vmath::Conv<f32, f32> for $name {
            #[inline(always)]
            fn to(s: f32) -> f64 {
                s as f64
            }
            #[inline(always)]
            fn from(v: f64) -> f32 {
                $narrow(v)
            }
        }
    )*};
}
conv!(ToF32: narrow_f32, ToF32Out: narrow_f32_out, ToBf16: narrow_bf16, ToF16: narrow_f16);

/// Runs `$body` with `$r` bound to the rounding of an f64 to the node's type (functions, not
/// closures, so they are inlined into the loops).
macro_rules! narrowed {
    ($rt:expr, $r:ident, $body:expr) => {
        match $rt {
            Round::F32 => {
                let $r = narrow_f32;
                $body
            }
            Round::F32Out => {
                let $r = narrow_f32_out;
                $body
            }
            Round::Bf16 => {
                let $r = narrow_bf16;
                $body
            }
            Round::F16 => {
                let $r = narrow_f16;
                $body
            }
        }
    };
}

#[inline(always)]
fn py_mod(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r != 0.0 && ((r < 0.0) != (b < 0.0)) { r + b } else { r }
}

/// The function of `u` over float values, rounded to the node's type.
#[inline(always)]
fn unary64(u: Unary, rt: Round, a: V, out: &mut [f32]) -> bool {
    #[inline(always)]
    fn go<C: vmath::Conv<f32, f32>>(u: Unary, a: V, out: &mut [f32]) -> bool {
        match a {
            V::F(s) => match s.get(..out.len()) {
                Some(s) => {
                    vmath::map_unary::<f32, f32, C>(u, s, out);
                    true
                }
                None => false,
            },
            V::FS(c) => {
                let mut one = [0.0f32];
                vmath::map_unary::<f32, f32, C>(u, &[c], &mut one);
                out.fill(one[0]);
                true
            }
            _ => false,
        }
    }
    match rt {
        Round::F32 => go::<ToF32>(u, a, out),
        Round::F32Out => go::<ToF32Out>(u, a, out),
        Round::Bf16 => go::<ToBf16>(u, a, out),
        Round::F16 => go::<ToF16>(u, a, out),
    }
}

/// Applies `code` to `args` into `out`, finishing float results with `rt`. False when the
/// operands are not of the kinds the code takes or are too short.
#[inline(always)]
pub fn eval(code: Code, rt: Round, args: &[V], out: Out) -> bool {
    use Code::*;
    match (code, out) {
        (Add, Out::F(o)) => rounded!(rt, r, bin!(F, args, o, |x, y| r(x + y))),
        (Sub, Out::F(o)) => rounded!(rt, r, bin!(F, args, o, |x, y| r(x - y))),
        (Mul, Out::F(o)) => rounded!(rt, r, bin!(F, args, o, |x, y| r(x * y))),
        (Div, Out::F(o)) => rounded!(rt, r, bin!(F, args, o, |x, y| r(x / y))),
        (Sqrt, Out::F(o)) => rounded!(rt, r, un!(F, args, o, |x| r(x.sqrt()))),
        (Copy, Out::F(o)) => rounded!(rt, r, un!(F, args, o, |x| r(x))),
        (Add64, Out::F(o)) => narrowed!(rt, r, bin!(F, args, o, |x, y| r(x as f64 + y as f64))),
        (Sub64, Out::F(o)) => narrowed!(rt, r, bin!(F, args, o, |x, y| r(x as f64 - y as f64))),
        (Mul64, Out::F(o)) => narrowed!(rt, r, bin!(F, args, o, |x, y| r(x as f64 * y as f64))),
        (Div64, Out::F(o)) => narrowed!(rt, r, bin!(F, args, o, |x, y| r(x as f64 / y as f64))),
        (FloorDiv, Out::F(o)) => narrowed!(rt, r, bin!(F, args, o, |x, y| r((x as f64 / y as f64).floor()))),
        (Mod, Out::F(o)) => narrowed!(rt, r, bin!(F, args, o, |x, y| r(py_mod(x as f64, y as f64)))),
        (Pow, Out::F(o)) => narrowed!(rt, r, bin!(F, args, o, |x, y| r((x as f64).powf(y as f64)))),
        (Unary(u), Out::F(o)) => unary64(u, rt, args[0], o),
        (Max, Out::F(o)) => finished!(rt, r, bin!(F, args, o, |x, y| r(fmax(x, y)))),
        (Min, Out::F(o)) => finished!(rt, r, bin!(F, args, o, |x, y| r(fmin(x, y)))),
        (Abs, Out::F(o)) => finished!(rt, r, un!(F, args, o, |x| r(x.abs()))),
        (Neg, Out::F(o)) => finished!(rt, r, un!(F, args, o, |x| r(-x))),
        (Relu, Out::F(o)) => finished!(rt, r, un!(F, args, o, |x| r(if x > 0.0 || x.is_nan() { x } else { 0.0 }))),
        (Floor, Out::F(o)) => finished!(rt, r, un!(F, args, o, |x| r(x.floor()))),
        (RoundEven, Out::F(o)) => finished!(rt, r, un!(F, args, o, |x| r(x.round_ties_even()))),
        (Trunc, Out::F(o)) => finished!(rt, r, un!(F, args, o, |x| r(x.trunc()))),
        (FromBool, Out::F(o)) => un!(B, args, o, |x| x as f32),
        (Where, Out::F(o)) => finished!(
            rt,
            r,
            operand!(
                B,
                args[0],
                c,
                operand!(
                    F,
                    args[1],
                    a,
                    operand!(F, args[2], b, map3(c, a, b, o, |c, x, y| r(if c != 0 { x } else { y })))
                )
            )
        ),
        (Eq, Out::B(o)) => bin!(F, args, o, |x, y| (x == y) as u8),
        (Ne, Out::B(o)) => bin!(F, args, o, |x, y| (x != y) as u8),
        (Gt, Out::B(o)) => bin!(F, args, o, |x, y| (x > y) as u8),
        (Ge, Out::B(o)) => bin!(F, args, o, |x, y| (x >= y) as u8),
        (IsNan, Out::B(o)) => un!(F, args, o, |x| x.is_nan() as u8),
        (IsInf, Out::B(o)) => un!(F, args, o, |x| x.is_infinite() as u8),
        (NonZero, Out::B(o)) => un!(F, args, o, |x| (x != 0.0) as u8),
        (And, Out::B(o)) => bin!(B, args, o, |x, y| x & y),
        (Or, Out::B(o)) => bin!(B, args, o, |x, y| x | y),
        (Xor, Out::B(o)) => bin!(B, args, o, |x, y| x ^ y),
        (BoolEq, Out::B(o)) => bin!(B, args, o, |x, y| (x == y) as u8),
        (BoolGt, Out::B(o)) => bin!(B, args, o, |x, y| x & (y ^ 1)),
        (BoolGe, Out::B(o)) => bin!(B, args, o, |x, y| x | (y ^ 1)),
        (Not, Out::B(o)) => un!(B, args, o, |x| x ^ 1),
        (BoolCopy, Out::B(o)) => un!(B, args, o, |x| x),
        (BoolWhere, Out::B(o)) => operand!(
            B,
            args[0],
            c,
            operand!(B, args[1], a, operand!(B, args[2], b, map3(c, a, b, o, |c, x, y| if c != 0 { x } else { y })))
        ),
        _ => false,
    }
}
