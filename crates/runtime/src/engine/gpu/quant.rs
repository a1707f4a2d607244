//! GPU kernels of the quant ops (kernels/quant.cu through `max_kernels_cuda::launch::quant`):
//! dequantize of the GGUF block encodings (bit-identical to the CPU), qmatmul (decode in
//! registers for up to 8 lhs rows, dequantize + f32 GEMM above) and GPTQ. Arguments are checked
//! as crates/runtime/src/cpu/quant.rs checks them, with the same messages. A GPTQ permutation
//! is copied to the host and checked there (the CPU's exact index errors); the kernels then
//! read it from the device.

use max_graph::DType;
use max_graph::ops::Op;
use max_kernels_cuda::launch::quant as k;

use crate::cuda::CudaDevice;
use crate::operands::{
    GptqCall, QuantCall, dequantize_geometry, gptq_call, lhs_rows, qmatmul_geometry, quant_call, read_indices, resolve,
};
use crate::{Buffer, Device, Error, Result};
use max_graph::ops::quant::Encoding;

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    if op.attrs.0.contains_key(crate::engine::passes::RESIDUAL) {
        return with_residual(dev, op, inputs, outputs);
    }
    if let [lhs, weights @ ..] = inputs {
        if weights.len() > 1 && weights.len() == outputs.len() {
            return siblings(dev, op, lhs, weights, outputs);
        }
    }
    match quant_call(op, inputs, outputs, "GPU")? {
        (QuantCall::Dequantize { enc, x }, out) => dequantize(dev, op, enc, x, out),
        (QuantCall::Gptq, out) => gptq(dev, op, inputs, out),
        (QuantCall::Block { enc, lhs, rhs }, out) => qmatmul(dev, op, enc, lhs, rhs, out),
    }
}

/// A qmatmul with its residual add (engine/passes/fuse_qmatmul_residual.rs): inputs lhs,
/// weights, residual (of the result's dtype and shape).
fn with_residual(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let [lhs, w, res] = inputs else {
        return Err(Error::Value(format!("{name}: a product with its residual takes lhs, weights and the residual")));
    };
    let pair = [lhs.clone(), w.clone()];
    let (QuantCall::Block { enc, lhs, rhs }, out) = quant_call(op, &pair, outputs, "GPU")? else {
        return Err(Error::Value(format!("{name}: a product with its residual must be block-quantized")));
    };
    if res.dtype() != out.dtype() || res.shape() != out.shape() {
        return Err(Error::Value(format!(
            "{name}: the residual is {} {:?}, the product {} {:?}",
            res.dtype(),
            res.shape(),
            out.dtype(),
            out.shape()
        )));
    }
    let res = if res.is_contiguous() { res.clone() } else { res.contiguous()? };
    let (m, n, kk, row_bytes) = qmatmul_geometry(op, enc, lhs, rhs, out)?;
    dev.bind()?;
    let ptrs = (lhs.addr(), rhs.addr(), out.addr());
    k::qmatmul_add(&dev.stream, enc, lhs.dtype(), ptrs, res.addr(), (m, n, kk, row_bytes)).map_err(Error::from)
}

/// A step of sibling qmatmuls (engine/passes/fuse_sibling_qmatmul.rs): `lhs` times each
/// weight into its output, each pair checked as a qmatmul of its own, launched together.
fn siblings(dev: &CudaDevice, op: &Op, lhs: &Buffer, weights: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let mut parts = Vec::with_capacity(weights.len());
    let mut common = None;
    let mut encoding = None;
    let lhs = if lhs.is_contiguous() { lhs.clone() } else { lhs.contiguous()? };
    for (w, out) in weights.iter().zip(outputs) {
        let pair = [lhs.clone(), w.clone()];
        let (QuantCall::Block { enc, lhs: l, rhs }, out) = quant_call(op, &pair, std::slice::from_ref(out), "GPU")?
        else {
            return Err(Error::Value(format!("{}: sibling products must be block-quantized", op.kind.name())));
        };
        let (m, n, kk, row_bytes) = qmatmul_geometry(op, enc, l, rhs, out)?;
        if common.is_some_and(|c| c != (m, kk, row_bytes)) || encoding.is_some_and(|e| e != enc) {
            return Err(Error::Value(format!("{}: sibling products must share rows, K and encoding", op.kind.name())));
        }
        (common, encoding) = (Some((m, kk, row_bytes)), Some(enc));
        parts.push((rhs.addr(), out.addr(), n));
    }
    let (Some(dims), Some(enc)) = (common, encoding) else { return Ok(()) };
    dev.bind()?;
    k::qmatmul_siblings(&dev.stream, enc, lhs.dtype(), lhs.addr(), &parts, dims).map_err(Error::from)
}

fn dequantize(dev: &CudaDevice, op: &Op, enc: Encoding, x: &Buffer, out: &Buffer) -> Result<()> {
    let (rows, per_row) = dequantize_geometry(op, enc, x, out)?;
    dev.bind()?;
    k::dequantize(&dev.stream, enc, x.addr(), out.addr(), rows * per_row).map_err(Error::from)
}

/// Leading rows of lhs `[..., k]` (its last dim must be `k`).
fn qmatmul(dev: &CudaDevice, op: &Op, enc: Encoding, lhs: &Buffer, rhs: &Buffer, out: &Buffer) -> Result<()> {
    let (m, n, kk, row_bytes) = qmatmul_geometry(op, enc, lhs, rhs, out)?;
    dev.bind()?;
    let ptrs = (lhs.addr(), rhs.addr(), out.addr());
    k::qmatmul(&dev.stream, enc, lhs.dtype(), ptrs, (m, n, kk, row_bytes)).map_err(Error::from)
}

/// GPTQ: the checks of crates/runtime/src/cpu/quant/gptq.rs, then the device kernels.
fn gptq(dev: &CudaDevice, op: &Op, inputs: &[Buffer], out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let GptqCall { group, lhs, rhs, perm } = gptq_call(op, inputs)?;
    let kk = lhs.shape().last().copied().unwrap_or(0);
    let &[rows, n] = rhs.shape() else {
        return Err(Error::Value(format!("{name}: GPTQ weights must be a matrix, got shape {:?}", rhs.shape())));
    };
    if kk % group != 0 || kk % 8 != 0 {
        return Err(Error::Value(format!("{name}: K = {kk} is not a multiple of the group size {group}")));
    }
    let want = kk / 2 + 2 * (kk / group);
    if rows != want {
        return Err(Error::Value(format!(
            "{name}: GPTQ weights for K = {kk} (groups of {group}) have K/2 + 2*K/{group} = {want} rows of bytes, got {rows}"
        )));
    }
    if let Some(p) = perm {
        // The permutation is small (K entries): checked on the host, with the CPU's messages.
        let host = p.copy_to(&Device::Cpu)?;
        let idx = read_indices(op, &host)?;
        if idx.len() != kk {
            return Err(Error::Value(format!("{name}: the permutation has {} entries, expected {kk}", idx.len())));
        }
        for i in idx {
            resolve(op, i, kk, &|| "the GPTQ permutation (the K dimension)".to_string())?;
        }
        if p.dtype() != DType::Int32 {
            return Err(Error::Value(format!(
                "{name}: the GPTQ permutation must be int32 on the GPU, got {}",
                p.dtype()
            )));
        }
    }
    let m = lhs_rows(op, lhs, kk)?;
    if out.dtype() != DType::BFloat16 || out.num_elements() != m * n {
        return Err(Error::Value(format!("{name}: the result must be bfloat16 [{m}, {n}]")));
    }
    dev.bind()?;
    let ptrs = (lhs.addr(), rhs.addr(), perm.map_or(0, |p| p.addr()), out.addr());
    max_kernels_cuda::launch::gptq::gptq(&dev.stream, ptrs, (m, n, kk, group)).map_err(Error::from)
}
