//! What every kernel call reads from its op and operands, on either backend: the op with its
//! buffers and attribute readers (`Kernel`), strided views of buffers, integer operands read at
//! run time (shapes, counts, indices) and the checks of axes and indices, each error naming the
//! op.

use max_graph::attrs::Attr;
use max_graph::ops::{Ctx, Op};
use max_graph::{DType, GraphError};

use crate::cpu::cast::{Canon, Elem};
use crate::strided::{self, View};
use crate::{Buffer, Error, Result, with_cast_type};

mod attention;
mod conv;
mod fft;
pub(crate) mod layout;
mod pool;
mod quant;
mod reduction;
mod sampling;

pub(crate) use attention::{fits_cache, query_shape};
pub(crate) use conv::{ConvGeometry, TransposeGeometry, conv_geometry, conv_io, conv_weights, transpose_geometry};
pub(crate) use fft::irfft_shape;
pub(crate) use pool::{Window, fold_window, pool_window};
pub(crate) use quant::{GptqCall, QuantCall, dequantize_geometry, gptq_call, lhs_rows, qmatmul_geometry, quant_call};
pub(crate) use reduction::{axis_lines, layer_norm_args};
pub(crate) use sampling::check_sampling;

/// One kernel call: the op and its buffers, with the helpers every layout kernel uses.
pub(crate) struct Kernel<'a> {
    pub op: &'a Op,
    pub inputs: &'a [Buffer],
    pub outputs: &'a [Buffer],
}

/// A graph error (from reading attributes) as a runtime error of the same kind.
pub(crate) fn graph_err(e: GraphError) -> Error {
    match e {
        GraphError::Value(m) => Error::Value(m),
        GraphError::Type(m) => Error::Type(m),
        GraphError::Index(m) => Error::Index(m),
    }
}

impl<'a> Kernel<'a> {
    pub fn name(&self) -> &'static str {
        self.op.kind.name()
    }

    /// A ValueError naming the op.
    pub fn err(&self, msg: impl AsRef<str>) -> Error {
        Error::Value(format!("{}: {}", self.name(), msg.as_ref()))
    }

    /// The attribute reader of the op's inference (no input types: messages name the op and
    /// the attribute).
    pub fn ctx(&self) -> Ctx<'a> {
        Ctx::of_op(self.op)
    }

    pub fn int(&self, key: &str) -> Result<i64> {
        self.ctx().int(key).map_err(graph_err)
    }

    pub fn opt_int(&self, key: &str) -> Result<Option<i64>> {
        self.ctx().opt_int(key).map_err(graph_err)
    }

    pub fn ints(&self, key: &str) -> Result<&'a [i64]> {
        self.ctx().ints(key).map_err(graph_err)
    }

    pub fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        self.ctx().boolean(key, default).map_err(graph_err)
    }

    /// A normalised axis of a rank-`rank` value.
    pub fn axis(&self, key: &str, raw: i64, rank: usize) -> Result<usize> {
        self.ctx().axis(key, raw, rank).map_err(graph_err)
    }

    pub fn input(&self, i: usize) -> Result<&'a Buffer> {
        self.inputs.get(i).ok_or_else(|| self.err(format!("expected an input #{i}, got {} inputs", self.inputs.len())))
    }

    pub fn output(&self, i: usize) -> Result<&'a Buffer> {
        self.outputs
            .get(i)
            .ok_or_else(|| self.err(format!("expected an output #{i}, got {} outputs", self.outputs.len())))
    }

    /// Output `i`, checked to have `x`'s dtype and to be contiguous, with its element size.
    pub fn out_like(&self, i: usize, x: &Buffer) -> Result<&'a Buffer> {
        let out = self.output(i)?;
        if out.dtype() != x.dtype() {
            return Err(self.err(format!("the result's dtype {} differs from the input's {}", out.dtype(), x.dtype())));
        }
        if !out.is_contiguous() {
            return Err(self.err("the result buffer must be contiguous"));
        }
        Ok(out)
    }

    /// The error for a result whose planned shape does not match what the inputs give.
    pub fn shape_err(&self, want: &[usize], got: &[usize]) -> Error {
        self.err(format!("the inputs give a result of shape {want:?} but the result was planned as {got:?}"))
    }
}

/// The element size of `b`'s dtype in bytes.
pub(crate) fn elem(b: &Buffer) -> usize {
    b.dtype().size_in_bytes()
}

/// `b`'s shape and element strides.
pub(crate) fn view(b: &Buffer) -> View {
    View { shape: b.shape().to_vec(), strides: b.strides().to_vec() }
}

/// The values of an integer tensor (any integer dtype, any layout) as i64, for counts, shapes
/// and indices read at run time.
pub(crate) fn read_ints(k: &Kernel, b: &Buffer, what: &str) -> Result<Vec<i64>> {
    let dt = b.dtype();
    if !dt.is_integral() {
        return Err(k.err(format!("{what}: expected an integer tensor, got {dt}")));
    }
    let n = b.num_elements();
    let width = elem(b);
    let mut bytes = vec![0u8; n * width];
    // SAFETY: the view of `b` is valid memory; `bytes` holds its n elements.
    let dst = strided::contiguous_strides(b.shape());
    unsafe { strided::copy(b.addr() as *const u8, &view(b), bytes.as_mut_ptr(), &dst, width) };
    let mut out = Vec::with_capacity(n);
    for c in bytes.chunks_exact(width) {
        let mut w = [0u8; 8];
        w[..width].copy_from_slice(c);
        let raw = u64::from_le_bytes(w);
        let v = match dt {
            DType::Int8 => raw as u8 as i8 as i64,
            DType::Int16 => raw as u16 as i16 as i64,
            DType::Int32 => raw as u32 as i32 as i64,
            DType::Int64 => raw as i64,
            DType::UInt64 if raw > i64::MAX as u64 => {
                return Err(k.err(format!("{what}: the value {raw} is too large")));
            }
            _ => raw as i64,
        };
        out.push(v);
    }
    Ok(out)
}

/// The boolean attribute `key` of `op`, `default` when absent.
pub(crate) fn flag(op: &Op, key: &str, default: bool) -> Result<bool> {
    match op.attrs.get(key) {
        None => Ok(default),
        Some(Attr::Bool(b)) => Ok(*b),
        Some(a) => Err(Error::Value(format!("{}: {key}: expected a bool, got {a}", op.kind.name()))),
    }
}

pub(crate) fn int_attr(op: &Op, key: &str) -> Result<i64> {
    match op.attrs.get(key) {
        Some(Attr::Int(i)) => Ok(*i),
        _ => Err(Error::Value(format!("{}: attribute {key} must be an integer", op.kind.name()))),
    }
}

/// `axis` in `-rank..rank-1` made non-negative.
pub(crate) fn axis_of(op: &Op, rank: usize) -> Result<usize> {
    let (axis, r) = (int_attr(op, "axis")?, rank as i64);
    if axis < -r || axis >= r {
        return Err(Error::Value(format!(
            "{}: axis {axis} is out of range for rank {rank} (expected {}..={})",
            op.kind.name(),
            -r,
            r - 1
        )));
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// The values of an integer index tensor as i64 (unsigned values past i64::MAX saturate, which
/// keeps them out of range instead of wrapping to a valid negative index).
pub(crate) fn read_indices(op: &Op, b: &Buffer) -> Result<Vec<i64>> {
    let n = b.num_elements();
    let dtype = b.dtype();
    with_cast_type!(
        dtype,
        T,
        {
            let p = b.addr() as *const T;
            Ok((0..n)
                // SAFETY: b is a contiguous host buffer of n elements of T.
                .map(|i| match unsafe { std::ptr::read_unaligned(p.add(i)) }.canon() {
                    Canon::I(v) => v,
                    Canon::U(u) => i64::try_from(u).unwrap_or(i64::MAX),
                    Canon::F(f) => f as i64,
                })
                .collect())
        },
        Err(Error::Value(format!("{}: indices of dtype {dtype} are not supported", op.kind.name())))
    )
}

/// An index into a dimension of size `size`, negative counting from the end.
pub(crate) fn resolve(op: &Op, index: i64, size: usize, what: &dyn Fn() -> String) -> Result<usize> {
    let n = size as i64;
    if index >= -n && index < n {
        return Ok(if index < 0 { (index + n) as usize } else { index as usize });
    }
    let range = if n == 0 { "it is empty".to_string() } else { format!("expected {}..={}", -n, n - 1) };
    Err(Error::Value(format!(
        "{}: index {index} is out of range for {} of size {size} ({range})",
        op.kind.name(),
        what()
    )))
}

/// Checks that `b` holds `want` elements of `dtype` (the planned output of the op).
pub(crate) fn expect(name: &str, what: &str, b: &Buffer, dtype: DType, want: usize) -> Result<()> {
    if b.dtype() != dtype || b.num_elements() != want {
        return Err(Error::Value(format!(
            "{name}: {what} is {} {:?}, expected {want} elements of {dtype}",
            b.dtype(),
            b.shape()
        )));
    }
    Ok(())
}

/// Checks that `b` (the operand `what` of `op`) holds `dtype` values.
pub(crate) fn expect_dtype(op: &Op, what: &str, b: &Buffer, dtype: DType) -> Result<()> {
    if b.dtype() != dtype {
        return Err(Error::Value(format!("{}: {what} must be {dtype}, got {}", op.kind.name(), b.dtype())));
    }
    Ok(())
}
