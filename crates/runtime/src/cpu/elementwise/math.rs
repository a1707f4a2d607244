//! The arithmetic of the elementwise ops on lanes: one op over borrowed operand values into an
//! output lane whose allocation is reused. Floats compute in f64, integers in 64 bits with
//! wrapping; the result is not yet rounded to the op's dtype. Each op has its own loop so the
//! compiler can vectorise the simple ones.

use max_graph::ops::{Op, OpKind};

use super::vmath::{self, Unary, multiversion};

use crate::cpu::lanes::fast::Wide;
use crate::cpu::lanes::{Arg, Lane};
use crate::{Error, Result};

fn bad(op: &str, what: &str) -> Error {
    Error::Value(format!("{op}: not defined for {what} values"))
}

/// The output's values, emptied, as a vector of `W`.
fn put<W: Wide>(out: &mut Lane) -> &mut Vec<W> {
    let v = W::vec(out);
    v.clear();
    v
}

macro_rules! map1 {
    ($out:expr, $w:ty, $x:expr, |$v:ident| $e:expr) => {
        put::<$w>($out).extend($x.iter().map(|&$v| $e))
    };
}

macro_rules! map2 {
    ($out:expr, $w:ty, $a:expr, $b:expr, |$x:ident, $y:ident| $e:expr) => {
        put::<$w>($out).extend($a.iter().zip($b.iter()).map(|(&$x, &$y)| $e))
    };
}

/// A float type of the lanes (f64 here, f32 in single.rs).
pub trait Flt: Copy + PartialOrd {
    const NAN: Self;
    fn nan(self) -> bool;
}

impl Flt for f64 {
    const NAN: f64 = f64::NAN;
    #[inline(always)]
    fn nan(self) -> bool {
        self.is_nan()
    }
}

impl Flt for f32 {
    const NAN: f32 = f32::NAN;
    #[inline(always)]
    fn nan(self) -> bool {
        self.is_nan()
    }
}

/// max: NaN if either is; the first of equal values (so max(-0, 0) is -0, as numpy's).
#[inline(always)]
pub fn fmax<T: Flt>(x: T, y: T) -> T {
    if x.nan() || y.nan() {
        T::NAN
    } else if x >= y {
        x
    } else {
        y
    }
}

/// min: NaN if either is; the first of equal values.
#[inline(always)]
pub fn fmin<T: Flt>(x: T, y: T) -> T {
    if x.nan() || y.nan() {
        T::NAN
    } else if x <= y {
        x
    } else {
        y
    }
}

multiversion! {
    /// The f64 function of `u` over `src` into `dst`.
    fn unary_f64(u: Unary, src: &[f64], dst: &mut [f64]) -> () {
        vmath::map_unary::<f64, f64, vmath::Same>(u, src, dst)
    }
}

/// Float unary ops; kinds without a float meaning give NaN.
fn unary_f(op: &Op, v: &[f64], out: &mut Lane) {
    use OpKind::*;
    match op.kind {
        Abs => map1!(out, f64, v, |x| x.abs()),
        Negate => map1!(out, f64, v, |x| -x),
        Floor => map1!(out, f64, v, |x| x.floor()),
        Round => map1!(out, f64, v, |x| x.round_ties_even()),
        Trunc => map1!(out, f64, v, |x| x.trunc()),
        Relu => map1!(out, f64, v, |x| if x > 0.0 || x.is_nan() { x } else { 0.0 }),
        _ => {
            let dst = put::<f64>(out);
            dst.resize(v.len(), 0.0);
            unary_f64(Unary::of(op).unwrap_or(Unary::Nan), v, dst);
        }
    }
}

fn unary(op: &Op, x: Arg, out: &mut Lane) {
    use OpKind::*;
    let k = op.kind;
    // Integer and bool values under a float-only op compute on their f64 values.
    let as_float = |v: Vec<f64>, out: &mut Lane| unary_f(op, &v, out);
    match x {
        Arg::F(v) => match k {
            IsNan => map1!(out, bool, v, |x| x.is_nan()),
            IsInf => map1!(out, bool, v, |x| x.is_infinite()),
            _ => unary_f(op, v, out),
        },
        Arg::I(v) => match k {
            Abs => map1!(out, i64, v, |x| x.wrapping_abs()),
            Negate => map1!(out, i64, v, |x| x.wrapping_neg()),
            Relu => map1!(out, i64, v, |x| x.max(0)),
            Floor | Round | Trunc => put::<i64>(out).extend_from_slice(v),
            _ => as_float(v.iter().map(|&x| x as f64).collect(), out),
        },
        Arg::U(v) => match k {
            Abs | Relu | Floor | Round | Trunc => put::<u64>(out).extend_from_slice(v),
            Negate => map1!(out, u64, v, |x| x.wrapping_neg()),
            _ => as_float(v.iter().map(|&x| x as f64).collect(), out),
        },
        Arg::B(v) => match k {
            LogicalNot => map1!(out, bool, v, |x| !x),
            Abs | Negate | Relu | Floor | Round | Trunc => put::<bool>(out).extend_from_slice(v),
            _ => as_float(v.iter().map(|&x| x as u8 as f64).collect(), out),
        },
    }
}

fn py_mod_f(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r != 0.0 && ((r < 0.0) != (b < 0.0)) { r + b } else { r }
}

fn pow_i(mut base: i64, mut exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let mut acc: i64 = 1;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    acc
}

fn binary(kind: OpKind, a: Arg, b: Arg, out: &mut Lane) -> Result<()> {
    use OpKind::*;
    let name = kind.name();
    match (a, b) {
        (Arg::F(a), Arg::F(b)) => match kind {
            Add => map2!(out, f64, a, b, |x, y| x + y),
            Sub => map2!(out, f64, a, b, |x, y| x - y),
            Mul => map2!(out, f64, a, b, |x, y| x * y),
            Div => map2!(out, f64, a, b, |x, y| x / y),
            FloorDiv => map2!(out, f64, a, b, |x, y| (x / y).floor()),
            Mod => map2!(out, f64, a, b, |x, y| py_mod_f(x, y)),
            Pow => map2!(out, f64, a, b, |x, y| x.powf(y)),
            Maximum => map2!(out, f64, a, b, |x, y| fmax(x, y)),
            Minimum => map2!(out, f64, a, b, |x, y| fmin(x, y)),
            Equal => map2!(out, bool, a, b, |x, y| x == y),
            NotEqual => map2!(out, bool, a, b, |x, y| x != y),
            Greater => map2!(out, bool, a, b, |x, y| x > y),
            GreaterEqual => map2!(out, bool, a, b, |x, y| x >= y),
            _ => return Err(bad(name, "float")),
        },
        (Arg::I(a), Arg::I(b)) => match kind {
            Add => map2!(out, i64, a, b, |x, y| x.wrapping_add(y)),
            Sub => map2!(out, i64, a, b, |x, y| x.wrapping_sub(y)),
            Mul => map2!(out, i64, a, b, |x, y| x.wrapping_mul(y)),
            Div => map2!(out, f64, a, b, |x, y| x as f64 / y as f64),
            FloorDiv => map2!(out, i64, a, b, |x, y| if y == 0 {
                0
            } else {
                x.wrapping_div(y) - ((x.wrapping_rem(y) != 0 && ((x < 0) != (y < 0))) as i64)
            }),
            Mod => map2!(out, i64, a, b, |x, y| if y == 0 {
                0
            } else {
                let r = x.wrapping_rem(y);
                if r != 0 && ((r < 0) != (y < 0)) { r + y } else { r }
            }),
            Pow => map2!(out, i64, a, b, |x, y| pow_i(x, y)),
            Maximum => map2!(out, i64, a, b, |x, y| x.max(y)),
            Minimum => map2!(out, i64, a, b, |x, y| x.min(y)),
            Equal => map2!(out, bool, a, b, |x, y| x == y),
            NotEqual => map2!(out, bool, a, b, |x, y| x != y),
            Greater => map2!(out, bool, a, b, |x, y| x > y),
            GreaterEqual => map2!(out, bool, a, b, |x, y| x >= y),
            _ => return Err(bad(name, "integer")),
        },
        (Arg::U(a), Arg::U(b)) => match kind {
            Add => map2!(out, u64, a, b, |x, y| x.wrapping_add(y)),
            Sub => map2!(out, u64, a, b, |x, y| x.wrapping_sub(y)),
            Mul => map2!(out, u64, a, b, |x, y| x.wrapping_mul(y)),
            Div => map2!(out, f64, a, b, |x, y| x as f64 / y as f64),
            FloorDiv => map2!(out, u64, a, b, |x, y| x.checked_div(y).unwrap_or(0)),
            Mod => map2!(out, u64, a, b, |x, y| x.checked_rem(y).unwrap_or(0)),
            Pow => map2!(out, u64, a, b, |x, y| x.wrapping_pow(y.min(u32::MAX as u64) as u32)),
            Maximum => map2!(out, u64, a, b, |x, y| x.max(y)),
            Minimum => map2!(out, u64, a, b, |x, y| x.min(y)),
            Equal => map2!(out, bool, a, b, |x, y| x == y),
            NotEqual => map2!(out, bool, a, b, |x, y| x != y),
            Greater => map2!(out, bool, a, b, |x, y| x > y),
            GreaterEqual => map2!(out, bool, a, b, |x, y| x >= y),
            _ => return Err(bad(name, "unsigned integer")),
        },
        (Arg::B(a), Arg::B(b)) => match kind {
            LogicalAnd | Mul | Minimum => map2!(out, bool, a, b, |x, y| x && y),
            LogicalOr | Add | Maximum => map2!(out, bool, a, b, |x, y| x || y),
            LogicalXor | Sub | NotEqual => map2!(out, bool, a, b, |x, y| x != y),
            Equal => map2!(out, bool, a, b, |x, y| x == y),
            Greater => map2!(out, bool, a, b, |x, y| x & !y),
            GreaterEqual => map2!(out, bool, a, b, |x, y| x | !y),
            _ => return Err(bad(name, "bool")),
        },
        _ => {
            return Err(Error::Value(format!("{name}: operands of different kinds reached the kernel")));
        }
    }
    Ok(())
}

fn select(c: Arg, x: Arg, y: Arg, out: &mut Lane) -> Result<()> {
    let Arg::B(c) = c else {
        return Err(Error::Value("where: condition is not bool".into()));
    };
    macro_rules! pick {
        ($w:ty, $a:expr, $b:expr) => {
            put::<$w>(out).extend(c.iter().zip($a.iter().zip($b.iter())).map(|(&c, (&a, &b))| if c { a } else { b }))
        };
    }
    match (x, y) {
        (Arg::F(a), Arg::F(b)) => pick!(f64, a, b),
        (Arg::I(a), Arg::I(b)) => pick!(i64, a, b),
        (Arg::U(a), Arg::U(b)) => pick!(u64, a, b),
        (Arg::B(a), Arg::B(b)) => pick!(bool, a, b),
        _ => {
            return Err(Error::Value("where: branches of different kinds reached the kernel".into()));
        }
    }
    Ok(())
}

fn copy(x: Arg, out: &mut Lane) {
    match x {
        Arg::F(v) => put::<f64>(out).extend_from_slice(v),
        Arg::I(v) => put::<i64>(out).extend_from_slice(v),
        Arg::U(v) => put::<u64>(out).extend_from_slice(v),
        Arg::B(v) => put::<bool>(out).extend_from_slice(v),
    }
}

/// Applies one op to operand values of equal length; `out` gets the unrounded result (a cast
/// gets its operand unchanged: rounding to the dtype is the caller's job).
pub fn eval(op: &Op, args: &[Arg], out: &mut Lane) -> Result<()> {
    match (op.kind, args) {
        (OpKind::Cast, [x]) => copy(*x, out),
        (OpKind::Where, [c, x, y]) => select(*c, *x, *y, out)?,
        (_, [x]) => unary(op, *x, out),
        (_, [a, b]) => binary(op.kind, *a, *b, out)?,
        _ => {
            return Err(Error::Value(format!("{}: wrong number of operands", op.kind.name())));
        }
    }
    Ok(())
}
