//! Elementwise ops on the host, one op or a fused group at a time, in one pass over memory:
//! the output is produced in chunks small enough to stay in cache; for each chunk every group
//! input is gathered (broadcasting by index math), every op of the group applied lane by lane,
//! and the result stored. Floats compute in f64, integers in 64 bits with wrapping, and the
//! result is rounded to its dtype with the cast rules.

use max_graph::attrs::Attrs;
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, Type};
use rayon::prelude::*;

use super::lanes::{Lane, kind_of, load, store};
use crate::engine::program::{Fused, Operand};
use crate::{Buffer, Error, Result};

const CHUNK: usize = 4096;

fn bad(op: &str, what: &str) -> Error {
    Error::Value(format!("{op}: not defined for {what} values"))
}

fn erf(x: f64) -> f64 {
    libm::erf(x)
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn unary_f(kind: OpKind, attrs: &Attrs, x: f64) -> f64 {
    match kind {
        OpKind::Abs => x.abs(),
        OpKind::Negate => -x,
        OpKind::Exp => x.exp(),
        OpKind::Log => x.ln(),
        OpKind::Log1p => x.ln_1p(),
        OpKind::Sqrt => x.sqrt(),
        OpKind::Rsqrt => 1.0 / x.sqrt(),
        OpKind::Sin => x.sin(),
        OpKind::Cos => x.cos(),
        OpKind::Tanh => x.tanh(),
        OpKind::Acos => x.acos(),
        OpKind::Atanh => x.atanh(),
        OpKind::Erf => erf(x),
        OpKind::Floor => x.floor(),
        OpKind::Round => x.round_ties_even(),
        OpKind::Trunc => x.trunc(),
        OpKind::Relu => {
            if x > 0.0 {
                x
            } else if x.is_nan() {
                x
            } else {
                0.0
            }
        }
        OpKind::Sigmoid => sigmoid(x),
        OpKind::Silu => x * sigmoid(x),
        OpKind::Gelu => match attrs.get("approximate") {
            Some(max_graph::Attr::Str(s)) if s == "tanh" => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            Some(max_graph::Attr::Str(s)) if s == "quick" => x * sigmoid(1.702 * x),
            _ => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        },
        _ => f64::NAN,
    }
}

fn unary(op: &Op, x: Lane) -> Result<Lane> {
    let k = op.kind;
    Ok(match x {
        Lane::F(v) => match k {
            OpKind::IsNan => Lane::B(v.iter().map(|x| x.is_nan()).collect()),
            OpKind::IsInf => Lane::B(v.iter().map(|x| x.is_infinite()).collect()),
            _ => Lane::F(v.into_iter().map(|x| unary_f(k, &op.attrs, x)).collect()),
        },
        Lane::I(v) => match k {
            OpKind::Abs => Lane::I(v.into_iter().map(i64::wrapping_abs).collect()),
            OpKind::Negate => Lane::I(v.into_iter().map(i64::wrapping_neg).collect()),
            OpKind::Relu => Lane::I(v.into_iter().map(|x| x.max(0)).collect()),
            OpKind::Floor | OpKind::Round | OpKind::Trunc => Lane::I(v),
            _ => Lane::F(v.into_iter().map(|x| unary_f(k, &op.attrs, x as f64)).collect()),
        },
        Lane::U(v) => match k {
            OpKind::Abs | OpKind::Relu | OpKind::Floor | OpKind::Round | OpKind::Trunc => Lane::U(v),
            OpKind::Negate => Lane::U(v.into_iter().map(u64::wrapping_neg).collect()),
            _ => Lane::F(v.into_iter().map(|x| unary_f(k, &op.attrs, x as f64)).collect()),
        },
        Lane::B(v) => match k {
            OpKind::LogicalNot => Lane::B(v.into_iter().map(|b| !b).collect()),
            OpKind::Abs | OpKind::Negate | OpKind::Relu | OpKind::Floor | OpKind::Round | OpKind::Trunc => Lane::B(v),
            _ => Lane::F(v.into_iter().map(|x| unary_f(k, &op.attrs, x as u8 as f64)).collect()),
        },
    })
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

macro_rules! zip {
    ($a:expr, $b:expr, |$x:ident, $y:ident| $e:expr) => {
        $a.iter().zip($b.iter()).map(|(&$x, &$y)| $e).collect()
    };
}

fn binary(kind: OpKind, a: &Lane, b: &Lane) -> Result<Lane> {
    use OpKind::*;
    let name = kind.name();
    Ok(match (a, b) {
        (Lane::F(a), Lane::F(b)) => match kind {
            Add => Lane::F(zip!(a, b, |x, y| x + y)),
            Sub => Lane::F(zip!(a, b, |x, y| x - y)),
            Mul => Lane::F(zip!(a, b, |x, y| x * y)),
            Div => Lane::F(zip!(a, b, |x, y| x / y)),
            FloorDiv => Lane::F(zip!(a, b, |x, y| (x / y).floor())),
            Mod => Lane::F(zip!(a, b, |x, y| py_mod_f(x, y))),
            Pow => Lane::F(zip!(a, b, |x, y| x.powf(y))),
            Maximum => Lane::F(zip!(a, b, |x, y| if x.is_nan() || y.is_nan() { f64::NAN } else { x.max(y) })),
            Minimum => Lane::F(zip!(a, b, |x, y| if x.is_nan() || y.is_nan() { f64::NAN } else { x.min(y) })),
            Equal => Lane::B(zip!(a, b, |x, y| x == y)),
            NotEqual => Lane::B(zip!(a, b, |x, y| x != y)),
            Greater => Lane::B(zip!(a, b, |x, y| x > y)),
            GreaterEqual => Lane::B(zip!(a, b, |x, y| x >= y)),
            _ => return Err(bad(name, "float")),
        },
        (Lane::I(a), Lane::I(b)) => match kind {
            Add => Lane::I(zip!(a, b, |x, y| x.wrapping_add(y))),
            Sub => Lane::I(zip!(a, b, |x, y| x.wrapping_sub(y))),
            Mul => Lane::I(zip!(a, b, |x, y| x.wrapping_mul(y))),
            Div => Lane::F(zip!(a, b, |x, y| x as f64 / y as f64)),
            FloorDiv => Lane::I(zip!(a, b, |x, y| if y == 0 {
                0
            } else {
                x.wrapping_div(y) - ((x.wrapping_rem(y) != 0 && ((x < 0) != (y < 0))) as i64)
            })),
            Mod => Lane::I(zip!(a, b, |x, y| if y == 0 {
                0
            } else {
                let r = x.wrapping_rem(y);
                if r != 0 && ((r < 0) != (y < 0)) { r + y } else { r }
            })),
            Pow => Lane::I(zip!(a, b, |x, y| pow_i(x, y))),
            Maximum => Lane::I(zip!(a, b, |x, y| x.max(y))),
            Minimum => Lane::I(zip!(a, b, |x, y| x.min(y))),
            Equal => Lane::B(zip!(a, b, |x, y| x == y)),
            NotEqual => Lane::B(zip!(a, b, |x, y| x != y)),
            Greater => Lane::B(zip!(a, b, |x, y| x > y)),
            GreaterEqual => Lane::B(zip!(a, b, |x, y| x >= y)),
            _ => return Err(bad(name, "integer")),
        },
        (Lane::U(a), Lane::U(b)) => match kind {
            Add => Lane::U(zip!(a, b, |x, y| x.wrapping_add(y))),
            Sub => Lane::U(zip!(a, b, |x, y| x.wrapping_sub(y))),
            Mul => Lane::U(zip!(a, b, |x, y| x.wrapping_mul(y))),
            Div => Lane::F(zip!(a, b, |x, y| x as f64 / y as f64)),
            FloorDiv => Lane::U(zip!(a, b, |x, y| x.checked_div(y).unwrap_or(0))),
            Mod => Lane::U(zip!(a, b, |x, y| x.checked_rem(y).unwrap_or(0))),
            Pow => Lane::U(zip!(a, b, |x, y| x.wrapping_pow(y.min(u32::MAX as u64) as u32))),
            Maximum => Lane::U(zip!(a, b, |x, y| x.max(y))),
            Minimum => Lane::U(zip!(a, b, |x, y| x.min(y))),
            Equal => Lane::B(zip!(a, b, |x, y| x == y)),
            NotEqual => Lane::B(zip!(a, b, |x, y| x != y)),
            Greater => Lane::B(zip!(a, b, |x, y| x > y)),
            GreaterEqual => Lane::B(zip!(a, b, |x, y| x >= y)),
            _ => return Err(bad(name, "unsigned integer")),
        },
        (Lane::B(a), Lane::B(b)) => match kind {
            LogicalAnd | Mul | Minimum => Lane::B(zip!(a, b, |x, y| x && y)),
            LogicalOr | Add | Maximum => Lane::B(zip!(a, b, |x, y| x || y)),
            LogicalXor | Sub | NotEqual => Lane::B(zip!(a, b, |x, y| x != y)),
            Equal => Lane::B(zip!(a, b, |x, y| x == y)),
            Greater => Lane::B(zip!(a, b, |x, y| x & !y)),
            GreaterEqual => Lane::B(zip!(a, b, |x, y| x | !y)),
            _ => return Err(bad(name, "bool")),
        },
        _ => {
            return Err(Error::Value(format!("{name}: operands of different kinds reached the kernel")));
        }
    })
}

fn select(c: &Lane, x: &Lane, y: &Lane) -> Result<Lane> {
    let Lane::B(c) = c else {
        return Err(Error::Value("where: condition is not bool".into()));
    };
    macro_rules! pick {
        ($v:ident, $a:expr, $b:expr) => {
            Lane::$v(c.iter().zip($a.iter().zip($b.iter())).map(|(&c, (&a, &b))| if c { a } else { b }).collect())
        };
    }
    Ok(match (x, y) {
        (Lane::F(a), Lane::F(b)) => pick!(F, a, b),
        (Lane::I(a), Lane::I(b)) => pick!(I, a, b),
        (Lane::U(a), Lane::U(b)) => pick!(U, a, b),
        (Lane::B(a), Lane::B(b)) => pick!(B, a, b),
        _ => {
            return Err(Error::Value("where: branches of different kinds reached the kernel".into()));
        }
    })
}

/// Applies one elementwise op to lanes; the result is rounded to `out`'s dtype.
pub fn apply(op: &Op, args: &[&Lane], out: &Type) -> Result<Lane> {
    let dtype = out
        .tensor()
        .map(|t| t.dtype)
        .ok_or_else(|| Error::Value(format!("{}: result is not a tensor", op.kind.name())))?;
    let raw = match (op.kind, args) {
        (OpKind::Cast, [x]) => (*x).clone(),
        (OpKind::Where, [c, x, y]) => select(c, x, y)?,
        (_, [x]) => unary(op, (*x).clone())?,
        (_, [a, b]) => binary(op.kind, a, b)?,
        _ => {
            return Err(Error::Value(format!("{}: wrong number of operands", op.kind.name())));
        }
    };
    if raw.kind() == kind_of(dtype) && matches!(dtype, DType::Float64 | DType::Int64 | DType::UInt64 | DType::Bool) {
        Ok(raw)
    } else {
        raw.convert(dtype)
    }
}

/// How one group input is read for a chunk of the output.
struct Reader {
    dtype: DType,
    ptr: *const u8,
    /// Element strides per output axis (0 where the input broadcasts).
    strides: Vec<isize>,
    same_layout: bool,
    scalar: bool,
}

// SAFETY: readers only read host memory that outlives the kernel call.
unsafe impl Sync for Reader {}

impl Reader {
    fn new(buf: &Buffer, out_shape: &[usize]) -> Result<Reader> {
        let rank = out_shape.len();
        let shape = buf.shape();
        if shape.len() > rank {
            return Err(Error::Value("elementwise input has a higher rank than the output".into()));
        }
        let pad = rank - shape.len();
        let mut strides = vec![0isize; rank];
        for (i, (&d, &s)) in shape.iter().zip(buf.strides()).enumerate() {
            if d != 1 {
                if d != out_shape[pad + i] {
                    return Err(Error::Value(format!(
                        "elementwise input shape {shape:?} does not broadcast to {out_shape:?}"
                    )));
                }
                strides[pad + i] = s;
            }
        }
        Ok(Reader {
            dtype: buf.dtype(),
            ptr: buf.addr() as *const u8,
            same_layout: shape == out_shape && buf.is_contiguous(),
            scalar: buf.num_elements() == 1,
            strides,
        })
    }

    fn read(&self, out_shape: &[usize], start: usize, len: usize) -> Result<Lane> {
        let offsets: Vec<isize> = if self.same_layout {
            (start as isize..(start + len) as isize).collect()
        } else if self.scalar {
            vec![0; len]
        } else {
            let rank = out_shape.len();
            let mut idx = vec![0usize; rank];
            let mut rest = start;
            for d in (0..rank).rev() {
                idx[d] = rest % out_shape[d].max(1);
                rest /= out_shape[d].max(1);
            }
            let mut off: isize = idx.iter().zip(&self.strides).map(|(i, s)| *i as isize * s).sum();
            let mut out = Vec::with_capacity(len);
            for _ in 0..len {
                out.push(off);
                for d in (0..rank).rev() {
                    idx[d] += 1;
                    off += self.strides[d];
                    if idx[d] < out_shape[d] {
                        break;
                    }
                    off -= self.strides[d] * out_shape[d] as isize;
                    idx[d] = 0;
                }
            }
            out
        };
        load(self.dtype, self.ptr, &offsets)
    }
}

/// Runs a fused group (or a single op wrapped as one) over host buffers; `out` is contiguous.
pub fn run(group: &Fused, inputs: &[Buffer], out: &Buffer) -> Result<()> {
    let out_shape = out.shape().to_vec();
    let readers: Vec<Reader> = inputs.iter().map(|b| Reader::new(b, &out_shape)).collect::<Result<_>>()?;
    let n = out.num_elements();
    let out_dtype = out.dtype();
    let out_ptr = out.addr() as usize;
    let chunks: Vec<usize> = (0..n).step_by(CHUNK).collect();
    chunks.par_iter().try_for_each(|&start| -> Result<()> {
        let len = CHUNK.min(n - start);
        let loaded: Vec<Lane> = readers.iter().map(|r| r.read(&out_shape, start, len)).collect::<Result<_>>()?;
        let mut values: Vec<Lane> = Vec::with_capacity(group.nodes.len());
        for (op, operands, ty) in &group.nodes {
            let args: Vec<&Lane> = operands
                .iter()
                .map(|o| match o {
                    Operand::Input(i) => &loaded[*i],
                    Operand::Node(j) => &values[*j],
                })
                .collect();
            let v = apply(op, &args, ty)?;
            values.push(v);
        }
        let result = values.last().ok_or_else(|| Error::Value("empty fused group".into()))?;
        store(out_dtype, result, out_ptr as *mut u8, start)
    })
}

/// A single elementwise op as a one-node group.
pub fn single(op: &Op, out_type: &Type, arity: usize) -> Fused {
    Fused { nodes: vec![(op.clone(), (0..arity).map(Operand::Input).collect(), out_type.clone())] }
}
