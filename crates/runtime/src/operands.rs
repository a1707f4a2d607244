//! What every kernel call reads from its op and operands, on either backend: the op with its
//! buffers and attribute readers (`Kernel`), strided views of buffers, integer operands read at
//! run time (shapes, counts, indices) and the checks of axes and indices, each error naming the
//! op.

use max_graph::attrs::Attr;
use max_graph::ops::quant::Encoding;
use max_graph::ops::sampling::{MAX_VOCAB, Rows};
use max_graph::ops::{Ctx, Op, OpKind};
use max_graph::{DType, GraphError};

use crate::cpu::cast::{Canon, Elem};
use crate::strided::{self, View};
use crate::{Buffer, Error, Result, with_cast_type};

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
        Ctx { kind: self.op.kind, inputs: &[], attrs: &self.op.attrs }
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

/// The dtypes every input of `op` must have, in order, and its result's.
pub(crate) fn sampling_dtypes(kind: OpKind) -> (&'static [DType], DType) {
    use DType::*;
    match kind {
        OpKind::SampleTokens => (&[Float32, Float32, Int64, Float32, Float32, UInt64], Int64),
        _ => (&[Float32, Int64, UInt32, UInt32, Float32, Float32, Float32], Float32),
    }
}

/// Checks the dtypes and shapes of a sampling op's run-time tensors.
pub(crate) fn check_sampling(name: &str, op: &Op, inputs: &[Buffer], out: &Buffer) -> Result<Rows> {
    let (want, out_dtype) = sampling_dtypes(op.kind);
    let args = op.kind.arg_names();
    if inputs.len() != want.len() {
        return Err(Error::Value(format!("{name}: expected {} inputs, got {}", want.len(), inputs.len())));
    }
    for ((b, &d), arg) in inputs.iter().zip(want).zip(args) {
        if b.dtype() != d {
            return Err(Error::Value(format!("{name}: {arg}: must be {d}, got {}", b.dtype())));
        }
    }
    let per_row: Vec<(&str, usize)> = match op.kind {
        OpKind::SampleTokens => (1..6).map(|i| (args[i], inputs[i].num_elements())).collect(),
        _ => (3..7).map(|i| (args[i], inputs[i].num_elements())).collect(),
    };
    let rows = Rows::check(inputs[0].shape(), &per_row).map_err(|m| Error::Value(format!("{name}: {m}")))?;
    if op.kind == OpKind::ApplyPenalties && inputs[2].num_elements() != rows.batch + 1 {
        return Err(Error::Value(format!(
            "{name}: offsets: holds {} values for {} rows of logits (expected batch + 1)",
            inputs[2].num_elements(),
            rows.batch
        )));
    }
    if op.kind == OpKind::SampleTokens && rows.vocab >= MAX_VOCAB {
        return Err(Error::Value(format!(
            "{name}: logits: rows of fewer than {MAX_VOCAB} values are supported, got {}",
            rows.vocab
        )));
    }
    let out_len = if op.kind == OpKind::SampleTokens { rows.batch } else { rows.batch * rows.vocab };
    if out.dtype() != out_dtype || out.num_elements() != out_len {
        return Err(Error::Value(format!(
            "{name}: the output is {} {:?}, expected {out_len} elements of {out_dtype}",
            out.dtype(),
            out.shape()
        )));
    }
    Ok(rows)
}

/// Checks that `b` (the operand `what` of `op`) holds `dtype` values.
pub(crate) fn expect_dtype(op: &Op, what: &str, b: &Buffer, dtype: DType) -> Result<()> {
    if b.dtype() != dtype {
        return Err(Error::Value(format!("{}: {what} must be {dtype}, got {}", op.kind.name(), b.dtype())));
    }
    Ok(())
}

/// Elements per row for rows of `row_bytes` bytes, which must be whole blocks.
pub(crate) fn row_elements(op: &Op, enc: Encoding, row_bytes: usize) -> Result<usize> {
    let (elems, bytes) = enc.block();
    if row_bytes % bytes != 0 {
        return Err(Error::Value(format!(
            "{}: rows of {row_bytes} bytes are not whole {enc:?} blocks of {bytes} bytes",
            op.kind.name()
        )));
    }
    Ok(row_bytes / bytes * elems)
}

/// The leading rows of `lhs`, whose last dim must be `k`.
pub(crate) fn lhs_rows(op: &Op, lhs: &Buffer, k: usize) -> Result<usize> {
    match lhs.shape().last() {
        Some(&d) if d == k => Ok(lhs.shape()[..lhs.rank() - 1].iter().product()),
        _ => Err(Error::Value(format!(
            "{}: lhs of shape {:?} must end in the {k} elements of a rhs row",
            op.kind.name(),
            lhs.shape()
        ))),
    }
}

/// A block-encoded qmatmul's checked geometry: float32 lhs `[..., K]`, uint8 rhs `[N, row_bytes]`
/// of whole blocks, a float32 result of `M * N` values; `(m, n, k, row_bytes)`.
pub(crate) fn qmatmul_geometry(
    op: &Op,
    enc: Encoding,
    lhs: &Buffer,
    rhs: &Buffer,
    out: &Buffer,
) -> Result<(usize, usize, usize, usize)> {
    expect_dtype(op, "lhs", lhs, DType::Float32)?;
    expect_dtype(op, "rhs", rhs, DType::UInt8)?;
    let &[n, row_bytes] = rhs.shape() else {
        return Err(Error::Value(format!("{}: rhs must be a matrix, got shape {:?}", op.kind.name(), rhs.shape())));
    };
    let k = row_elements(op, enc, row_bytes)?;
    let m = lhs_rows(op, lhs, k)?;
    if out.dtype() != DType::Float32 || out.num_elements() != m * n {
        return Err(Error::Value(format!("{}: the result must be float32 [{m}, {n}]", op.kind.name())));
    }
    Ok((m, n, k, row_bytes))
}

/// A GPTQ qmatmul's configuration and operands: bfloat16 lhs, the uint8 weights and (with
/// `desc_act`) the permutation of K, with the group size (4-bit weights only).
pub(crate) struct GptqCall<'a> {
    pub group: usize,
    pub lhs: &'a Buffer,
    pub rhs: &'a Buffer,
    pub perm: Option<&'a Buffer>,
}

pub(crate) fn gptq_call<'a>(op: &Op, inputs: &'a [Buffer]) -> Result<GptqCall<'a>> {
    let name = op.kind.name();
    let int = |key: &str| match op.attrs.get(key) {
        Some(Attr::Int(i)) => Ok(*i),
        _ => Err(Error::Value(format!("{name}: GPTQ needs the integer attribute {key}"))),
    };
    let (bits, group) = (int("bits")?, int("group_size")?);
    if bits != 4 || group <= 0 {
        return Err(Error::Value(format!("{name}: unsupported GPTQ configuration: bits={bits}, group_size={group}")));
    }
    let desc_act = matches!(op.attrs.get("desc_act"), Some(Attr::Bool(true)));
    let (lhs, rhs, perm) = match (inputs, desc_act) {
        ([lhs, rhs], false) => (lhs, rhs, None),
        ([lhs, rhs, perm], true) => (lhs, rhs, Some(perm)),
        _ => {
            return Err(Error::Value(format!(
                "{name}: GPTQ takes lhs, the weights and (with desc_act) the permutation"
            )));
        }
    };
    expect_dtype(op, "lhs", lhs, DType::BFloat16)?;
    expect_dtype(op, "rhs", rhs, DType::UInt8)?;
    Ok(GptqCall { group: group as usize, lhs, rhs, perm })
}

/// A dequantize's checked geometry: uint8 `[..., row_bytes]` of whole blocks into a float32
/// result of as many values; `(rows, values per row)`.
pub(crate) fn dequantize_geometry(op: &Op, enc: Encoding, x: &Buffer, out: &Buffer) -> Result<(usize, usize)> {
    expect_dtype(op, "the quantized tensor", x, DType::UInt8)?;
    let row_bytes = x.shape().last().copied().unwrap_or(0);
    let per_row = row_elements(op, enc, row_bytes)?;
    let rows = x.num_elements().checked_div(row_bytes).unwrap_or(0);
    if out.dtype() != DType::Float32 || out.num_elements() != rows * per_row {
        return Err(Error::Value(format!(
            "{}: the result must be float32 with {} elements, got {} {:?}",
            op.kind.name(),
            rows * per_row,
            out.dtype(),
            out.shape()
        )));
    }
    Ok((rows, per_row))
}

/// `x` split around the op's `axis` attribute as (outer, n, inner): the elements before the
/// axis, along it and after it (a scalar is one element when `need_rank` is false).
pub(crate) fn axis_lines(op: &Op, x: &Buffer, need_rank: bool) -> Result<(usize, usize, usize)> {
    let name = op.kind.name();
    let axis = match op.attrs.get("axis") {
        Some(Attr::Int(a)) => *a,
        _ => return Err(Error::Value(format!("{name}: axis: expected an integer"))),
    };
    let shape = x.shape();
    let rank = shape.len() as i64;
    if rank == 0 && !need_rank && (axis == 0 || axis == -1) {
        return Ok((1, 1, 1));
    }
    let a = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&a) {
        return Err(Error::Index(format!("{name}: axis {axis} is out of range for shape {shape:?}")));
    }
    let a = a as usize;
    Ok((shape[..a].iter().product(), shape[a], shape[a + 1..].iter().product()))
}
