//! A `Gemm` step of q/k/v products with the decode step's rope + KV-cache store folded in
//! (`GemmEpilogue::rope_store`, passes/fuse_qkv_rope_store.rs) on the GPU: at one token one
//! gemv_nt.cu launch stores the products rotated into rope(q) and the cache (launch/gemv_nt.rs
//! `NtRope`); otherwise the products (matmul.rs), then the rope + store launch through their
//! outputs, as the two steps ran before the pass joined them. The folded launch sums each row
//! of W in one warp, as the unfused products do unless their plain launch splits K over warps
//! (gemv_nt.rs `plan_ks`: few rows of long K, no norm folded), whose rounding then differs.

use max_graph::ops::Op;
use max_graph::ops::reduction::RmsNormParams;
use max_kernels_cuda::launch::epilogue::Epilogue;
use max_kernels_cuda::launch::gemv_nt::{self, Fusion, NormPrologue, NtRope};

use super::super::program::GemmEpilogue;
use super::folded_store::FoldedStore;
use crate::cuda::CudaDevice;
use crate::{Buffer, Error, Result};

/// Inputs: the products' (x, W_q, W_k, W_v, the norm weight if any), then the store's chain,
/// blocks, slots, freqs_cis and positions; outputs: q, k and v (and the normalised x), then the
/// store's chain and rope(q) (folded_store.rs), as given (matmul.rs `fused` runs this first).
pub(super) fn with_rope_store(
    dev: &CudaDevice,
    g: &GemmEpilogue,
    store: &Op,
    inputs: &[Buffer],
    outputs: &[Buffer],
) -> Result<()> {
    let f = FoldedStore::new(store, inputs, outputs)?;
    let plain = GemmEpilogue { rope_store: None, ..g.clone() };
    if f.call.shape.tokens == 1 {
        // (the kernel reads x, the weights and the norm weight as dense rows)
        let dense: Vec<Buffer> = f
            .inputs
            .iter()
            .map(|b| if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() })
            .collect::<Result<_>>()?;
        if folded(dev, &plain, &f, &dense)? {
            return Ok(());
        }
    }
    super::matmul::fused(dev, &plain, f.inputs, f.outputs)?;
    f.launch(dev)
}

/// One gemv_nt launch of the products with the store in their epilogue, where a kernel takes
/// them (one row of x, products of exactly the store's heads); Ok(false) launches nothing.
fn folded(dev: &CudaDevice, g: &GemmEpilogue, f: &FoldedStore, inputs: &[Buffer]) -> Result<bool> {
    let (outputs, call) = (f.outputs, &f.call);
    let (Some(x), Some(ws), Some(outs)) = (inputs.first(), inputs.get(1..4), outputs.get(..3)) else {
        return Ok(false);
    };
    let k = *x.shape().last().unwrap_or(&0);
    let rows = x.num_elements() / k.max(1);
    let dim = call.cache.head_dim;
    let heads = [call.shape.heads, call.cache.kv_heads, call.cache.kv_heads];
    let fits = ws.iter().zip(outs).zip(heads).all(|((w, o), h)| {
        w.shape() == [h * dim, k] && o.num_elements() == h * dim && w.dtype() == x.dtype() && o.dtype() == x.dtype()
    });
    if rows != 1 || !fits || g.bias || g.residual || g.act.is_some() || g.gated.is_some() {
        return Ok(false);
    }
    let norm = match (&g.norm, inputs.get(4)) {
        (Some(op), Some(gamma)) => {
            let params = RmsNormParams::from_attrs(&op.attrs).map_err(|m| Error::Value(format!("rms_norm: {m}")))?;
            if gamma.shape() != [k] || gamma.dtype() != x.dtype() {
                return Err(Error::Value(format!(
                    "rms_norm: the weight {:?} does not match {:?}",
                    gamma.shape(),
                    x.shape()
                )));
            }
            Some(NormPrologue { gamma: gamma.addr(), params, post: g.norm_post })
        }
        (Some(_), None) => return Ok(false),
        (None, _) => None,
    };
    let s = &call.shape;
    let rope = NtRope::new(
        f.addrs(),
        &call.cache,
        call.layer,
        (s.positions, s.rot, call.flags.freqs_f32),
        call.flags.interleaved,
    );
    let fusion = Fusion { norm, gated_up: None, rope: Some(rope) };
    let ns: Vec<usize> = heads.iter().map(|h| h * dim).collect();
    let addrs: Vec<u64> = ws.iter().map(|w| w.addr()).collect();
    let dtype = x.dtype();
    if gemv_nt::plan(dtype, rows, &ns, k, x.addr(), &addrs, &fusion).is_none() {
        return Ok(false);
    }
    let parts: Vec<(u64, u64, usize)> =
        ws.iter().zip(outs).zip(&ns).map(|((w, o), &n)| (w.addr(), o.addr(), n)).collect();
    dev.bind()?;
    let epi = Epilogue::default();
    gemv_nt::gemv_nt(&dev.stream, dtype, x.addr(), &parts, (rows, k), &epi, &fusion, g.const_weights)?;
    Ok(true)
}
