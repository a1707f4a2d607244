//! GPU kernels of the quant ops (kernels/quant.cu through `max_kernels_cuda::launch::quant`):
//! dequantize of the GGUF block encodings (bit-identical to the CPU), qmatmul (decode in
//! registers for up to 8 lhs rows, dequantize + f32 GEMM above) and GPTQ. Arguments are checked
//! as crates/runtime/src/cpu/quant.rs checks them, with the same messages. A GPTQ permutation
//! is copied to the host and checked there (the CPU's exact index errors); the kernels then
//! read it from the device.

use max_graph::ops::reduction::RmsNormParams;
use max_graph::ops::{Op, OpKind};
use max_graph::{Attr, DType, Type};
use max_kernels_cuda::launch::quant as k;

use crate::cuda::CudaDevice;
use crate::engine::program::{Body, StepKind};
use crate::operands::{
    GptqCall, QuantCall, dequantize_geometry, gptq_call, lhs_rows, qmatmul_geometry, quant_call, read_indices, resolve,
};
use crate::{Buffer, Device, Error, Result};
use max_graph::ops::quant::Encoding;

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    if let Some((store, product)) = crate::engine::passes::split_rope_store(op) {
        return with_rope_store(dev, &store, &product, inputs, outputs);
    }
    if op.attrs.0.contains_key(crate::engine::passes::NORM) || op.attrs.0.contains_key(crate::engine::passes::GATED) {
        folded(dev, op, inputs, outputs, k::QRope::default())?;
        return Ok(());
    }
    if op.attrs.0.contains_key(crate::engine::passes::RESIDUAL) {
        return with_residual(dev, op, inputs, outputs);
    }
    if let [lhs, weights @ ..] = inputs
        && weights.len() > 1
        && weights.len() == outputs.len()
    {
        return siblings(dev, op, lhs, weights, outputs);
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
    let consts = crate::engine::passes::const_weights(op);
    k::qmatmul_add(&dev.stream, enc, lhs.dtype(), ptrs, res.addr(), (m, n, kk, row_bytes), consts).map_err(Error::from)
}

/// q/k/v products with the layer's rope + KV-cache store folded in
/// (engine/passes/fuse_qkv_rope_store.rs): the product step's inputs, then the store's chain,
/// blocks, slots, freqs_cis and positions; its outputs (q, k and v first), then the store's
/// chain and rope(q). One GEMV launch where a kernel takes it (launch::quant::fold_path with a
/// `QRope`); otherwise the product step, then the rope + store launch through its outputs.
fn with_rope_store(dev: &CudaDevice, store: &Op, product: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let f = super::folded_store::FoldedStore::new(store, inputs, outputs)?;
    let (call, [q, kk, v, ..]) = (&f.call, f.outputs) else {
        return Err(Error::Value(format!("{}: q/k/v products without three outputs", store.kind.name())));
    };
    // The kernels store rows r < m at token r, each product's n rows as heads x head_dim: only
    // products of exactly the store's shapes (a graph may view other shapes as them), and pairs
    // on even rows.
    let (tokens, dim) = (call.shape.tokens, call.cache.head_dim);
    let rows =
        |b: &Buffer, heads: usize| b.shape().last() == Some(&(heads * dim)) && b.num_elements() == tokens * heads * dim;
    let fits = rows(q, call.shape.heads) && rows(kk, call.cache.kv_heads) && rows(v, call.cache.kv_heads);
    if call.flags.interleaved && fits && dim % 2 == 0 && crate::engine::passes::split_qgated(product).is_none() {
        let sh = call.shape;
        let rope = k::QRope::new(f.addrs(), &call.cache, call.layer, (sh.positions, sh.rot, call.flags.freqs_f32));
        if folded(dev, product, f.inputs, f.outputs, rope)? {
            return Ok(());
        }
    }
    run(dev, product, f.inputs, f.outputs)?;
    f.launch(dev)
}

/// A step of sibling qmatmuls (engine/passes/fuse_sibling_qmatmul.rs): `lhs` times each
/// weight into its output, each pair checked as a qmatmul of its own, launched together.
fn siblings(dev: &CudaDevice, op: &Op, lhs: &Buffer, weights: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let lhs = if lhs.is_contiguous() { lhs.clone() } else { lhs.contiguous()? };
    let Some((enc, parts, dims)) = sibling_parts(op, &lhs, weights, outputs)? else { return Ok(()) };
    dev.bind()?;
    let consts = crate::engine::passes::const_weights(op);
    k::qmatmul_siblings(&dev.stream, enc, lhs.dtype(), lhs.addr(), &parts, dims, consts).map_err(Error::from)
}

/// A qmatmul step with a folded rms_norm and/or a gated pair (engine/passes/fuse_norm_gemv.rs,
/// fuse_gated_gemv.rs): inputs x, the weights (gate and up for a pair), the norm weight if
/// any; outputs the products (a pair's one), the gate and up values if gated, the normalised
/// x if normed. One GEMV launch where a kernel takes the problem
/// (max_kernels_cuda::launch::quant::fold_path); otherwise the steps it replaced, through
/// those scratch values. With `rope` (on: plain or normed q/k/v products, with_rope_store),
/// Ok(false) launches nothing where no kernel takes it all.
fn folded(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer], rope: k::QRope) -> Result<bool> {
    let (norm, op) = match crate::engine::passes::split_qnorm(op) {
        Some((norm, product)) => (Some(norm), product),
        None => (None, op.clone()),
    };
    let (gated, op) = match crate::engine::passes::split_qgated(&op) {
        Some((act, product)) => (Some(act), product),
        None => (None, op),
    };
    let name = op.kind.name();
    let bad = || Error::Value(format!("{name}: the inputs and outputs of a product with folded steps do not match"));
    let (mut ins, mut outs) = (inputs, outputs);
    let mut gamma_normed = None;
    if norm.is_some() {
        let ([rest @ .., gamma], [orest @ .., normed]) = (ins, outs) else { return Err(bad()) };
        gamma_normed = Some((gamma, normed));
        (ins, outs) = (rest, orest);
    }
    let [x, weights @ ..] = ins else { return Err(bad()) };
    let (results, scratch) = match gated {
        Some(_) => outs.split_at(outs.len().checked_sub(2).ok_or_else(bad)?),
        None => (outs, &[][..]),
    };
    let products = if gated.is_some() { scratch } else { results };
    if weights.is_empty() || weights.len() != products.len() || (gated.is_some() && results.len() != 1) {
        return Err(bad());
    }
    let packed = |b: &Buffer| if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() };
    let x = packed(x)?;
    let kk = *x.shape().last().unwrap_or(&1);
    let mut qnorm = k::QNorm::default();
    let mut norm_of = None;
    if let (Some(nop), Some((gamma, normed))) = (&norm, gamma_normed) {
        let params = RmsNormParams::from_attrs(&nop.attrs).map_err(|m| Error::Value(format!("rms_norm: {m}")))?;
        let gamma = packed(gamma)?;
        if gamma.shape() != [kk]
            || gamma.dtype() != x.dtype()
            || normed.dtype() != x.dtype()
            || normed.shape() != x.shape()
        {
            return Err(Error::Value(format!(
                "rms_norm: the weight {} {:?} (and the normalised value) must match x {} {:?}",
                gamma.dtype(),
                gamma.shape(),
                x.dtype(),
                x.shape()
            )));
        }
        qnorm = k::QNorm::new(gamma.addr(), &params);
        norm_of = Some((params, gamma, normed));
    }
    if gated.is_some() && (results[0].dtype() != products[0].dtype() || results[0].shape() != products[0].shape()) {
        return Err(bad());
    }
    let Some((enc, parts, dims)) = sibling_parts(&op, &x, weights, products)? else { return Ok(true) };
    dev.bind()?;
    let consts = crate::engine::passes::const_weights(&op);
    let fold = k::QFold { norm: qnorm, gated: gated.is_some(), rope, consts };
    let mut one = parts.clone();
    if gated.is_some() {
        one[0].1 = results[0].addr();
    }
    if k::qmatmul_folded(&dev.stream, enc, x.dtype(), x.addr(), &one, fold, dims)? {
        return Ok(true);
    }
    if fold.rope.on() {
        return Ok(false);
    }
    // The steps it replaced: the norm into its value, the products, the fused silu * mul.
    let lhs = match &norm_of {
        Some((p, gamma, normed)) => {
            let (eps, offset, mbc) = (p.epsilon, p.weight_offset, p.multiply_before_cast);
            let ptrs = (x.addr(), gamma.addr(), normed.addr());
            max_kernels_cuda::launch::reduction::rms_norm(&dev.stream, x.dtype(), ptrs, dims.0, kk, eps, offset, mbc)?;
            normed.addr()
        }
        None => x.addr(),
    };
    // (many rows of a gated pair: the qmatmul with silu * mul in its store, where it applies)
    if gated.is_some() && k::qmatmul_gated(&dev.stream, enc, x.dtype(), lhs, &one, dims)? {
        return Ok(true);
    }
    k::qmatmul_siblings(&dev.stream, enc, x.dtype(), lhs, &parts, dims, consts)?;
    if let Some(act) = gated {
        let group = crate::engine::passes::gated_group(act, results[0].dtype(), results[0].shape());
        super::run_fused(dev, &group, scratch, &results[0])?;
    }
    Ok(true)
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
    let consts = crate::engine::passes::const_weights(op);
    k::qmatmul(&dev.stream, enc, lhs.dtype(), ptrs, (m, n, kk, row_bytes), consts).map_err(Error::from)
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

/// Starts compiling, in the background, the kernel families of every block-quantized qmatmul in
/// `body` (its encoding and lhs dtype, on its GPU): Model::load calls it before the weights
/// load, so that NVRTC's minutes run then, on spare cores, instead of at the first product of
/// the first request (a GGUF model has 1-3 encodings, each its own qgemv family).
pub(crate) fn prefetch(body: &Body, types: &[Type], devices: &[Device]) {
    let mut wanted: Vec<(String, &'static max_kernels_cuda::sources::Family)> = vec![];
    collect(body, types, devices, &mut wanted);
    wanted.sort_by_key(|(arch, f)| (arch.clone(), f.name));
    wanted.dedup();
    let mut archs: Vec<&String> = wanted.iter().map(|(a, _)| a).collect();
    archs.dedup();
    for arch in archs {
        let families: Vec<_> = wanted.iter().filter(|(a, _)| a == arch).map(|(_, f)| *f).collect();
        // Detached: a compile that fails is compiled again, and reported, at its launch.
        drop(max_kernels_cuda::prefetch(arch, &families));
    }
}

fn collect(
    body: &Body,
    types: &[Type],
    devices: &[Device],
    out: &mut Vec<(String, &'static max_kernels_cuda::sources::Family)>,
) {
    for step in &body.steps {
        for b in &step.bodies {
            collect(b, types, devices, out);
        }
        let StepKind::Op(op) = &step.kind else { continue };
        let enc = match op.attrs.get("encoding") {
            Some(Attr::Str(s)) if op.kind == OpKind::QMatmul => Encoding::parse(s),
            _ => None,
        };
        let lhs = step.inputs.first().and_then(|v| types.get(*v)).and_then(|t| t.tensor());
        let (Some(enc), Some(lhs)) = (enc, lhs) else { continue };
        let Ok(Device::Cuda(dev)) = crate::engine::model::resolve_device(devices, lhs.device) else { continue };
        // An activation dtype the kernels do not take fails at launch, with its message.
        if let Ok(families) = k::families(enc, lhs.dtype, &dev.arch) {
            out.extend(families.into_iter().map(|f| (dev.arch.clone(), f)));
        }
    }
}
