//! Fused groups whose inputs, values and result are all float32, bfloat16, float16 or bool: they
//! run on lanes of f32 (every value of these types is an f32) and u8 (bools as 0 or 1), with
//! the same bits as the f64 lanes of elementwise.rs:
//! * add, sub, mul, div and sqrt compute in f32 when their operands are of the result's type:
//!   rounding the f32 result to float32, bfloat16 or float16 gives what rounding the exact
//!   result does (f32 has at least 2p + 2 bits of these types' p), as the f64 path gives;
//! * other float functions widen to f64 (exactly), compute there and round to the node's type
//!   with the cast rules (through an f32 rounded to odd for the narrow types), as that path;
//! * max, min, abs, relu, where, comparisons and the like are exact in either;
//! * a float32 result gets NaN's canonical bits when stored, as the cast rules give.
//!
//! The one difference: the sign of a NaN that arithmetic on NaNs produces (IEEE 754 leaves it
//! unspecified; x86 gives the first operand's, in an order the compiler picks in either path).
//!
//! A float32 input read in order is used in place, and a float32 or bool result written in
//! place; the chunk loop is compiled for AVX2 and AVX-512 as well and chosen at run time.

mod conv;
mod kernels;

use max_graph::DType;
use max_graph::ops::{Op, OpKind};

use super::vmath::{Unary, multiversion};
use super::{Access, Reader};
use crate::shared::{Fused, Operand};
use crate::{Buffer, Error, Result};
use conv::Float;
use kernels::{Code, Out, Round, V};

/// Elements per chunk: the f32 lanes of a group stay in the L1/L2 caches.
pub(super) const CHUNK: usize = 2048;

/// The type of a value of the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Float(Float),
    Bool,
}

fn ty_of(d: DType) -> Option<Ty> {
    Some(match d {
        DType::Float32 => Ty::Float(Float::F32),
        DType::BFloat16 => Ty::Float(Float::Bf16),
        DType::Float16 => Ty::Float(Float::F16),
        DType::Bool => Ty::Bool,
        _ => return None,
    })
}

/// The code of `op` on operands of types `args` giving a `ty`, or None when this path does not
/// compute it (the f64 lanes then do, or report the error).
fn code(op: &Op, args: &[Ty], ty: Ty) -> Option<Code> {
    use OpKind::*;
    use Ty::Bool as B;
    let same = args.iter().all(|a| *a == ty);
    Some(match (op.kind, args, ty) {
        (Cast, [Ty::Float(_)], Ty::Float(_)) => Code::Copy,
        (Cast, [B], Ty::Float(_)) => Code::FromBool,
        (Cast, [Ty::Float(_)], B) => Code::NonZero,
        (Cast, [B], B) => Code::BoolCopy,
        (Where, [B, x, y], t) if *x == t && *y == t => {
            if t == B {
                Code::BoolWhere
            } else {
                Code::Where
            }
        }
        (IsNan, [Ty::Float(_)], B) => Code::IsNan,
        (IsInf, [Ty::Float(_)], B) => Code::IsInf,
        (k, [Ty::Float(_)], Ty::Float(_)) => match k {
            Sqrt if same => Code::Sqrt,
            Abs if same => Code::Abs,
            Negate if same => Code::Neg,
            Relu if same => Code::Relu,
            Floor if same => Code::Floor,
            Round if same => Code::RoundEven,
            Trunc if same => Code::Trunc,
            Abs | Negate | Relu | Floor | Round | Trunc => return None,
            _ => Code::Unary(Unary::of(op)?),
        },
        (k, [B], B) => match k {
            LogicalNot => Code::Not,
            Abs | Negate | Relu | Floor | Round | Trunc => Code::BoolCopy,
            _ => return None,
        },
        (k, [Ty::Float(_), Ty::Float(_)], Ty::Float(_)) => match (k, same) {
            (Add, true) => Code::Add,
            (Sub, true) => Code::Sub,
            (Mul, true) => Code::Mul,
            (Div, true) => Code::Div,
            (Add, false) => Code::Add64,
            (Sub, false) => Code::Sub64,
            (Mul, false) => Code::Mul64,
            (Div, false) => Code::Div64,
            (FloorDiv, _) => Code::FloorDiv,
            (Mod, _) => Code::Mod,
            (Pow, _) => Code::Pow,
            (Maximum, true) => Code::Max,
            (Minimum, true) => Code::Min,
            _ => return None,
        },
        (k, [Ty::Float(_), Ty::Float(_)], B) => match k {
            Equal => Code::Eq,
            NotEqual => Code::Ne,
            Greater => Code::Gt,
            GreaterEqual => Code::Ge,
            _ => return None,
        },
        (k, [B, B], B) => match k {
            LogicalAnd | Mul | Minimum => Code::And,
            LogicalOr | Add | Maximum => Code::Or,
            LogicalXor | Sub | NotEqual => Code::Xor,
            Equal => Code::BoolEq,
            Greater => Code::BoolGt,
            GreaterEqual => Code::BoolGe,
            _ => return None,
        },
        _ => return None,
    })
}

/// Rough cost of a code per element, in units of a float32 add.
fn cost(code: Code) -> usize {
    match code {
        Code::Unary(_) | Code::Mod | Code::Pow => 40,
        Code::Div | Code::Sqrt | Code::Add64 | Code::Sub64 | Code::Mul64 | Code::Div64 | Code::FloorDiv => 4,
        _ => 1,
    }
}

/// How an input is read for a chunk.
enum Source {
    /// float32 memory in output order, used in place.
    Direct(*const f32),
    /// One value for every output element.
    Scalar(V<'static>),
    /// Gathered (and widened) into the input's scratch lane.
    Gather,
}

struct Input<'r> {
    reader: &'r Reader,
    ty: Ty,
    source: Source,
}

struct Node {
    code: Code,
    ty: Ty,
    args: [Operand; 3],
    arity: usize,
    /// All operands are one value each: the node is computed once per chunk.
    scalar: bool,
}

/// A group checked for this path against its buffers.
pub(super) struct Single<'r> {
    inputs: Vec<Input<'r>>,
    nodes: Vec<Node>,
    out_ty: Ty,
    out_ptr: usize,
    /// The last node writes straight into the output (float32 and bool results).
    direct_out: bool,
}

// SAFETY: the plan only reads its inputs and writes disjoint chunks of its output, host memory
// that outlives the kernel call.
unsafe impl Sync for Single<'_> {}

/// A scratch lane.
enum Lane {
    F(Vec<f32>),
    B(Vec<u8>),
}

impl Lane {
    fn new(ty: Ty, len: usize) -> Lane {
        match ty {
            Ty::Float(_) => Lane::F(vec![0.0; len]),
            Ty::Bool => Lane::B(vec![0; len]),
        }
    }

    fn value(&self, len: usize, scalar: bool) -> Option<V<'_>> {
        Some(match (self, scalar) {
            (Lane::F(v), false) => V::F(v.get(..len)?),
            (Lane::B(v), false) => V::B(v.get(..len)?),
            (Lane::F(v), true) => V::FS(*v.first()?),
            (Lane::B(v), true) => V::BS(*v.first()?),
        })
    }

    fn out(&mut self, len: usize) -> Option<Out<'_>> {
        Some(match self {
            Lane::F(v) => Out::F(v.get_mut(..len)?),
            Lane::B(v) => Out::B(v.get_mut(..len)?),
        })
    }
}

struct Scratch {
    inputs: Vec<Lane>,
    nodes: Vec<Lane>,
}

/// Element 0 of a one-value input, as a lane value.
fn scalar_of(r: &Reader, ty: Ty) -> V<'static> {
    // SAFETY: the buffer holds at least one element and the pointer is aligned (checked).
    unsafe {
        match (ty, r.dtype) {
            (Ty::Bool, _) => V::BS((*r.ptr != 0) as u8),
            (_, DType::BFloat16) => V::FS(conv::bf16_to_f32(*r.ptr.cast::<u16>())),
            (_, DType::Float16) => V::FS(conv::f16_to_f32(*r.ptr.cast::<u16>())),
            _ => V::FS(*r.ptr.cast::<f32>()),
        }
    }
}

impl<'r> Single<'r> {
    /// The plan for `group` when this path computes it.
    pub(super) fn new(group: &Fused, readers: &'r [Reader], out: &Buffer) -> Option<Single<'r>> {
        let mut inputs = Vec::with_capacity(readers.len());
        for r in readers {
            let ty = ty_of(r.dtype)?;
            if !(r.ptr as usize).is_multiple_of(r.dtype.size_in_bytes()) || r.count == 0 {
                return None;
            }
            let source = match r.access {
                Access::Constant => Source::Scalar(scalar_of(r, ty)),
                Access::Contiguous if r.dtype == DType::Float32 => Source::Direct(r.ptr.cast()),
                _ => Source::Gather,
            };
            inputs.push(Input { reader: r, ty, source });
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(group.nodes.len());
        for (op, operands, t) in &group.nodes {
            let ty = ty_of(t.tensor()?.dtype)?;
            if operands.is_empty() || operands.len() > 3 {
                return None;
            }
            let mut args = [Operand::Input(0); 3];
            let mut tys = [Ty::Bool; 3];
            let mut scalar = true;
            for (i, o) in operands.iter().enumerate() {
                args[i] = *o;
                (tys[i], scalar) = match *o {
                    Operand::Input(k) => {
                        let input = inputs.get(k)?;
                        (input.ty, scalar && matches!(input.source, Source::Scalar(_)))
                    }
                    Operand::Node(k) => {
                        let node = nodes.get(k)?;
                        (node.ty, scalar && node.scalar)
                    }
                };
            }
            let code = code(op, &tys[..operands.len()], ty)?;
            nodes.push(Node { code, ty, args, arity: operands.len(), scalar });
        }
        let last = nodes.last_mut()?;
        last.scalar = false;
        let out_ty = ty_of(out.dtype())?;
        if out_ty != last.ty || !(out.addr() as usize).is_multiple_of(out.dtype().size_in_bytes()) {
            return None;
        }
        Some(Single {
            inputs,
            nodes,
            out_ty,
            out_ptr: out.addr() as usize,
            direct_out: matches!(out_ty, Ty::Float(Float::F32) | Ty::Bool),
        })
    }

    /// Work per output element, in units of a float32 add.
    pub(super) fn cost(&self) -> usize {
        let gathered = self.inputs.iter().filter(|i| matches!(i.source, Source::Gather)).count();
        1 + 2 * gathered + self.nodes.iter().map(|n| cost(n.code)).sum::<usize>()
    }

    /// Lanes for chunks of up to `len` elements.
    fn scratch(&self, len: usize) -> Scratch {
        Scratch {
            inputs: self
                .inputs
                .iter()
                .map(|i| Lane::new(i.ty, if matches!(i.source, Source::Gather) { len } else { 0 }))
                .collect(),
            nodes: self.nodes.iter().map(|n| Lane::new(n.ty, if n.scalar { 1 } else { len })).collect(),
        }
    }

    /// Computes output elements `lo..hi`.
    pub(super) fn range(&self, lo: usize, hi: usize) -> Result<()> {
        let mut s = self.scratch(CHUNK.min(hi - lo));
        for start in (lo..hi).step_by(CHUNK) {
            if !chunk(self, &mut s, start, CHUNK.min(hi - start)) {
                return Err(Error::Value("elementwise: operands of unexpected kinds reached the kernel".into()));
            }
        }
        Ok(())
    }
}

/// Fills `$dst` with `$conv` of the elements `$stride` apart from `$src` (a macro, not a
/// function taking the conversion, so the loops are compiled into the chunk's version).
/// Safety: `$src` must be aligned and every element read inside the input's buffer.
macro_rules! gather {
    ($src:expr, $stride:expr, $dst:expr, $conv:path) => {{
        let (src, dst) = ($src, $dst);
        let n = dst.len();
        match $stride {
            1 => dst.iter_mut().zip(std::slice::from_raw_parts(src, n)).for_each(|(d, &s)| *d = $conv(s)),
            0 => dst.fill($conv(*src)),
            s => dst.iter_mut().enumerate().for_each(|(i, d)| *d = $conv(*src.offset(i as isize * s))),
        }
    }};
}

#[inline(always)]
fn bool_byte(b: u8) -> u8 {
    (b != 0) as u8
}

#[inline(always)]
fn same(x: f32) -> f32 {
    x
}

/// Reads output elements `start..start + len` of a gathered input into its lane.
#[inline(always)]
fn read(input: &Input, lane: &mut Lane, start: usize, len: usize) -> Option<()> {
    let r = input.reader;
    let mut pos = 0;
    for (off, stride, n) in r.runs(start, len) {
        let end = pos + n;
        // SAFETY: the reader's runs address elements of its buffer, whose pointer is aligned
        // (checked by `Single::new`).
        unsafe {
            match (&mut *lane, r.dtype) {
                (Lane::B(v), _) => gather!(r.ptr.offset(off), stride, v.get_mut(pos..end)?, bool_byte),
                (Lane::F(v), DType::BFloat16) => {
                    gather!(r.ptr.cast::<u16>().offset(off), stride, v.get_mut(pos..end)?, conv::bf16_to_f32)
                }
                (Lane::F(v), DType::Float16) => {
                    gather!(r.ptr.cast::<u16>().offset(off), stride, v.get_mut(pos..end)?, conv::f16_to_f32)
                }
                (Lane::F(v), DType::Float32) => {
                    gather!(r.ptr.cast::<f32>().offset(off), stride, v.get_mut(pos..end)?, same)
                }
                _ => return None,
            }
        }
        pos = end;
    }
    (pos == len).then_some(())
}

multiversion! {
    /// Computes output elements `start..start + len` (at most CHUNK); false when an operand is
    /// not of the kind its code takes (a bug of `Single::new`).
    fn chunk(p: &Single, s: &mut Scratch, start: usize, len: usize) -> bool {
        for (input, lane) in p.inputs.iter().zip(&mut s.inputs) {
            if matches!(input.source, Source::Gather) && read(input, lane, start, len).is_none() {
                return false;
            }
        }
        let last = p.nodes.len() - 1;
        for (j, node) in p.nodes.iter().enumerate() {
            let (done, rest) = s.nodes.split_at_mut(j);
            let n = if node.scalar { 1 } else { len };
            let mut args = [V::BS(0); 3];
            for (a, o) in args.iter_mut().zip(&node.args[..node.arity]) {
                let v = match *o {
                    Operand::Input(i) => match p.inputs[i].source {
                        // SAFETY: a direct input has the output's element count.
                        Source::Direct(ptr) => Some(V::F(unsafe { std::slice::from_raw_parts(ptr.add(start), len) })),
                        Source::Scalar(v) => Some(v),
                        Source::Gather => s.inputs[i].value(len, false),
                    },
                    Operand::Node(k) => done[k].value(len, p.nodes[k].scalar),
                };
                let Some(v) = v else { return false };
                *a = v;
            }
            let rt = match node.ty {
                Ty::Float(f) => Round::of(f, j == last),
                Ty::Bool => Round::F32,
            };
            let out = if j == last && p.direct_out {
                // SAFETY: the output holds the chunk, aligned, and only this call writes it.
                unsafe {
                    match p.out_ty {
                        Ty::Bool => Out::B(std::slice::from_raw_parts_mut((p.out_ptr as *mut u8).add(start), len)),
                        _ => Out::F(std::slice::from_raw_parts_mut((p.out_ptr as *mut f32).add(start), len)),
                    }
                }
            } else {
                match rest[0].out(n) {
                    Some(o) => o,
                    None => return false,
                }
            };
            if !kernels::eval(node.code, rt, &args[..node.arity], out) {
                return false;
            }
        }
        store(p, &s.nodes[last], start, len)
    }
}

/// Finishes the chunk's output: the storage bits of the narrow float types (float32 and bool
/// results are written in place, finished).
#[inline(always)]
fn store(p: &Single, result: &Lane, start: usize, len: usize) -> bool {
    // SAFETY: the output holds the chunk, aligned, and only this call writes it.
    match (p.out_ty, result) {
        (Ty::Bool | Ty::Float(Float::F32), _) => true,
        (Ty::Float(f), Lane::F(v)) => {
            let Some(v) = v.get(..len) else { return false };
            let out = unsafe { std::slice::from_raw_parts_mut((p.out_ptr as *mut u16).add(start), len) };
            match f {
                Float::Bf16 => out.iter_mut().zip(v).for_each(|(o, &x)| *o = conv::f32_to_bf16(x)),
                _ => out.iter_mut().zip(v).for_each(|(o, &x)| *o = conv::f32_to_f16(x)),
            }
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
