//! GPU kernels of the quant ops (kernels/quant.cu through `max_kernels_cuda::launch::quant`):
//! dequantize of the GGUF block encodings (bit-identical to the CPU), qmatmul (decode in
//! registers for up to 8 lhs rows, dequantize + f32 GEMM above) and GPTQ. Arguments are checked
//! as crates/runtime/src/cpu/quant.rs checks them, with the same messages. A GPTQ permutation
//! is copied to the host and checked there (the CPU's exact index errors); the kernels then
//! read it from the device.

use max_graph::DType;
use max_graph::ops::Op;
use max_graph::ops::reduction::RmsNormParams;
use max_kernels_cuda::launch::quant as k;

use crate::cuda::CudaDevice;
use crate::operands::{
    GptqCall, QuantCall, dequantize_geometry, gptq_call, lhs_rows, qmatmul_geometry, quant_call, read_indices, resolve,
};
use crate::{Buffer, Device, Error, Result};
use max_graph::ops::quant::Encoding;

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    if let Some((norm, product)) = crate::engine::passes::split_qnorm(op) {
        return normed(dev, &norm, &product, inputs, outputs);
    }
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
    let lhs = if lhs.is_contiguous() { lhs.clone() } else { lhs.contiguous()? };
    let Some((enc, parts, dims)) = sibling_parts(op, &lhs, weights, outputs)? else { return Ok(()) };
    dev.bind()?;
    k::qmatmul_siblings(&dev.stream, enc, lhs.dtype(), lhs.addr(), &parts, dims).map_err(Error::from)
}

/// A qmatmul step with a folded rms_norm (engine/passes/fuse_norm_gemv.rs): inputs x, the
/// weights, the norm weight; outputs the products, then the normalised x. One GEMV launch
/// normalises x as it stages it where a kernel takes the problem
/// (max_kernels_cuda::launch::quant::norm_path); otherwise the rms_norm kernel writes the
/// normalised x and the products read it.
fn normed(dev: &CudaDevice, norm: &Op, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let bad = || Error::Value(format!("{name}: a product with a folded rms_norm takes x, weights and the norm weight"));
    let ([x, weights @ .., gamma], [outs @ .., normed]) = (inputs, outputs) else { return Err(bad()) };
    if weights.is_empty() || weights.len() != outs.len() {
        return Err(bad());
    }
    let params = RmsNormParams::from_attrs(&norm.attrs).map_err(|m| Error::Value(format!("rms_norm: {m}")))?;
    let packed = |b: &Buffer| if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() };
    let (x, gamma) = (packed(x)?, packed(gamma)?);
    let kk = *x.shape().last().unwrap_or(&1);
    if gamma.shape() != [kk] || gamma.dtype() != x.dtype() || normed.dtype() != x.dtype() || normed.shape() != x.shape()
    {
        return Err(Error::Value(format!(
            "rms_norm: the weight {} {:?} (and the normalised value) must match x {} {:?}",
            gamma.dtype(),
            gamma.shape(),
            x.dtype(),
            x.shape()
        )));
    }
    let Some((enc, parts, dims)) = sibling_parts(op, &x, weights, outs)? else { return Ok(()) };
    dev.bind()?;
    let qn = k::QNorm::new(gamma.addr(), &params);
    if k::qmatmul_normed(&dev.stream, enc, x.dtype(), x.addr(), &parts, qn, dims)? {
        return Ok(());
    }
    let rows = x.num_elements() / kk.max(1);
    let (eps, offset, mbc) = (params.epsilon, params.weight_offset, params.multiply_before_cast);
    let ptrs = (x.addr(), gamma.addr(), normed.addr());
    max_kernels_cuda::launch::reduction::rms_norm(&dev.stream, x.dtype(), ptrs, rows, kk, eps, offset, mbc)?;
    k::qmatmul_siblings(&dev.stream, enc, x.dtype(), normed.addr(), &parts, dims).map_err(Error::from)
}

type Parts = (Encoding, Vec<(u64, u64, usize)>, (usize, usize, usize));

/// The encoding, (weights, output, rows) of each product and (rows, K, row bytes) of `lhs`
/// (contiguous) times each weight into its output, each pair checked as a qmatmul of its own;
/// None for no products.
fn sibling_parts(op: &Op, lhs: &Buffer, weights: &[Buffer], outputs: &[Buffer]) -> Result<Option<Parts>> {
    let mut parts = Vec::with_capacity(weights.len());
    let mut common = None;
    let mut encoding = None;
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
    Ok(common.zip(encoding).map(|(dims, enc)| (enc, parts, dims)))
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
