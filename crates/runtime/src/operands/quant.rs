//! The operand checks of the quant ops (dequantize, block-encoded and GPTQ qmatmul), shared by
//! the host and CUDA kernels: encodings, block geometry and dtypes.

use max_graph::DType;
use max_graph::attrs::Attr;
use max_graph::ops::quant::Encoding;
use max_graph::ops::{Op, OpKind};

use super::expect_dtype;
use crate::{Buffer, Error, Result};

/// Elements per row for rows of `row_bytes` bytes, which must be whole blocks.
pub(crate) fn row_elements(op: &Op, enc: Encoding, row_bytes: usize) -> Result<usize> {
    let (elems, bytes) = enc.block();
    if !row_bytes.is_multiple_of(bytes) {
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

/// A block-encoded qmatmul's checked geometry: float lhs `[..., K]` (float32; the GPU kernels
/// also take bfloat16 and float16, the CPU's check float32 first), uint8 rhs `[N, row_bytes]` of
/// whole blocks, a result of lhs's dtype and `M * N` values; `(m, n, k, row_bytes)`.
pub(crate) fn qmatmul_geometry(
    op: &Op,
    enc: Encoding,
    lhs: &Buffer,
    rhs: &Buffer,
    out: &Buffer,
) -> Result<(usize, usize, usize, usize)> {
    if !matches!(lhs.dtype(), DType::Float32 | DType::BFloat16 | DType::Float16) {
        return Err(Error::Value(format!(
            "{}: lhs must be float32, bfloat16 or float16, got {}",
            op.kind.name(),
            lhs.dtype()
        )));
    }
    expect_dtype(op, "rhs", rhs, DType::UInt8)?;
    let &[n, row_bytes] = rhs.shape() else {
        return Err(Error::Value(format!("{}: rhs must be a matrix, got shape {:?}", op.kind.name(), rhs.shape())));
    };
    let k = row_elements(op, enc, row_bytes)?;
    let m = lhs_rows(op, lhs, k)?;
    if out.dtype() != lhs.dtype() || out.num_elements() != m * n {
        return Err(Error::Value(format!("{}: the result must be {} [{m}, {n}]", op.kind.name(), lhs.dtype())));
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

/// The block encoding named `name`.
fn block_encoding(op: &Op, name: &str) -> Result<Encoding> {
    Encoding::parse(name).ok_or_else(|| {
        Error::Value(format!(
            "{}: unsupported quantization encoding {name} (block encodings: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K)",
            op.kind.name()
        ))
    })
}

/// A quant op call with its operands picked out: what the kernels of either backend run.
pub(crate) enum QuantCall<'a> {
    Dequantize {
        enc: Encoding,
        x: &'a Buffer,
    },
    /// A GPTQ qmatmul: its operands are checked by `gptq_call`.
    Gptq,
    /// A qmatmul of float lhs by a block-encoded rhs.
    Block {
        enc: Encoding,
        lhs: &'a Buffer,
        rhs: &'a Buffer,
    },
}

/// The call `op` makes and its one output; `device` ("CPU" or "GPU") names the backend in the
/// error for an op that is not a quant op.
pub(crate) fn quant_call<'a>(
    op: &Op,
    inputs: &'a [Buffer],
    outputs: &'a [Buffer],
    device: &str,
) -> Result<(QuantCall<'a>, &'a Buffer)> {
    let name = op.kind.name();
    let (Some(first), [out]) = (inputs.first(), outputs) else {
        return Err(Error::Value(format!("{name}: expected inputs and one output")));
    };
    let encoding = match op.attrs.get("encoding") {
        Some(Attr::Str(s)) => s.as_str(),
        _ => return Err(Error::Value(format!("{name}: attribute encoding must be a string"))),
    };
    let call = match op.kind {
        OpKind::Dequantize => QuantCall::Dequantize { enc: block_encoding(op, encoding)?, x: first },
        OpKind::QMatmul if encoding == "GPTQ" => QuantCall::Gptq,
        OpKind::QMatmul => {
            let [lhs, rhs] = inputs else {
                return Err(Error::Value(format!("{name}: {encoding} takes lhs and one quantized tensor")));
            };
            QuantCall::Block { enc: block_encoding(op, encoding)?, lhs, rhs }
        }
        _ => return Err(Error::Value(format!("{name}: no {device} kernel for this op"))),
    };
    Ok((call, out))
}
