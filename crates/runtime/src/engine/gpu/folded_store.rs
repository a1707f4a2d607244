//! The rope + KV-cache store folded into a step of q/k/v products (passes/fuse_qkv_rope_store.rs),
//! as quantized (quant.rs) and 16-bit (matmul_rope.rs) steps share it: the step's inputs and
//! outputs split into the products' and the store's, the store checked over the products'
//! outputs as it sees them, and its own launch where the products' kernel does not take it.

use max_graph::ops::Op;
use max_graph::ops::attention::CacheLayout;
use max_kernels_cuda::launch::attention as k;

use super::attention::{RopeStoreCall, rope_store_call};
use crate::cuda::CudaDevice;
use crate::{Buffer, Error, Result};

/// A step's products and its folded store.
pub(crate) struct FoldedStore<'a> {
    /// The products' inputs (x, the weights, the norm weight if any) and outputs (q, k and v
    /// first).
    pub inputs: &'a [Buffer],
    pub outputs: &'a [Buffer],
    /// The store over q as rope(q) and k and v as rows of the cache.
    pub call: RopeStoreCall,
    /// rope(q), the cache, the slots, freqs_cis and the positions (packed: they stay alive as
    /// long as this).
    pub rope_q: Buffer,
    pub blocks: Buffer,
    pub slots: Buffer,
    pub freqs: Buffer,
    pub positions: Buffer,
}

impl<'a> FoldedStore<'a> {
    /// From the step's inputs (the products', then the store's chain, blocks, slots, freqs_cis
    /// and positions) and outputs (the products', then the store's chain and rope(q)). The cache
    /// is written in place: a strided one is refused rather than copied.
    pub(crate) fn new(store: &Op, inputs: &'a [Buffer], outputs: &'a [Buffer]) -> Result<FoldedStore<'a>> {
        let name = store.kind.name();
        let bad =
            || Error::Value(format!("{name}: the inputs and outputs of q/k/v products with their store do not match"));
        let (Some(pin), Some(pout)) = (inputs.len().checked_sub(5), outputs.len().checked_sub(2)) else {
            return Err(bad());
        };
        let ((products_in, [_, blocks, slots, freqs, positions]), (products_out, [_, rope_q])) =
            ((&inputs[..pin], &inputs[pin..]), (&outputs[..pout], &outputs[pout..]))
        else {
            return Err(bad());
        };
        let [q, kk, v, ..] = products_out else { return Err(bad()) };
        if !blocks.is_contiguous() {
            return Err(Error::Value(format!("{name}: the KV cache must be a contiguous buffer")));
        }
        let packed = |b: &Buffer| if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() };
        let (slots, freqs, positions) = (packed(slots)?, packed(freqs)?, packed(positions)?);
        let c = CacheLayout::from_shape(blocks.shape()).map_err(|m| Error::Value(format!("{name}: {m}")))?;
        let kv = vec![slots.num_elements(), c.kv_heads, c.head_dim];
        let view = |b: &Buffer, shape: Vec<usize>| b.reshaped(shape).map_err(|e| Error::Value(format!("{name}: {e}")));
        let (qv, kv3, vv) = (view(q, rope_q.shape().to_vec())?, view(kk, kv.clone())?, view(v, kv)?);
        let call = rope_store_call(store, [blocks, &kv3, &vv, &slots, &qv, &freqs, &positions], rope_q)?;
        Ok(FoldedStore {
            inputs: products_in,
            outputs: products_out,
            call,
            rope_q: rope_q.clone(),
            blocks: blocks.clone(),
            slots,
            freqs,
            positions,
        })
    }

    /// rope(q), the cache, the slots, freqs_cis and the positions' addresses, in that order.
    pub(crate) fn addrs(&self) -> (u64, u64, u64, u64, u64) {
        (self.rope_q.addr(), self.blocks.addr(), self.slots.addr(), self.freqs.addr(), self.positions.addr())
    }

    /// The store as its own launch, through the products' outputs (written by then).
    pub(crate) fn launch(&self, dev: &CudaDevice) -> Result<()> {
        let c = &self.call;
        k::rope_kv_store(&dev.stream, self.rope_q.dtype(), c.ptrs, c.shape, c.cache, c.layer, c.flags)
            .map_err(Error::from)
    }
}

#[cfg(test)]
mod tests {
    use max_graph::DType;
    use max_graph::attrs::{Attr, Attrs};
    use max_graph::ops::OpKind;

    use super::*;
    use crate::Device;
    use crate::index::IndexItem;

    fn empty(dtype: DType, shape: &[i64]) -> Buffer {
        Buffer::empty(dtype, shape, &Device::Cpu).unwrap()
    }

    /// A normed q/k/v step's inputs and outputs (x, W_q, W_k, W_v, gamma | chain, blocks,
    /// slots, freqs, positions; q, k, v, normed | chain, rope(q)): 2 q heads, 1 kv head of 4 dims.
    fn step(blocks: Buffer) -> (Op, Vec<Buffer>, Vec<Buffer>) {
        let f32 = DType::Float32;
        let attrs =
            Attrs::new().with("layer", Attr::Int(1)).with(max_graph::ops::attention::STORE_ROPE, Attr::Bool(false));
        let store = Op { kind: OpKind::KvCacheStore, attrs };
        let inputs = vec![
            empty(f32, &[1, 8]),
            empty(f32, &[8, 8]),
            empty(f32, &[4, 8]),
            empty(f32, &[4, 8]),
            empty(f32, &[8]),
            empty(DType::Bool, &[0]),
            blocks,
            empty(DType::UInt32, &[1]),
            empty(f32, &[5, 4]),
            empty(DType::UInt32, &[1]),
        ];
        let outputs = vec![
            empty(f32, &[1, 8]),
            empty(f32, &[1, 4]),
            empty(f32, &[1, 4]),
            empty(f32, &[1, 8]),
            empty(DType::Bool, &[0]),
            empty(f32, &[1, 2, 4]),
        ];
        (store, inputs, outputs)
    }

    #[test]
    fn the_step_splits_into_the_products_and_the_store() {
        let (store, inputs, outputs) = step(empty(DType::Float32, &[3, 2, 2, 2, 1, 4]));
        let f = FoldedStore::new(&store, &inputs, &outputs).unwrap();
        assert_eq!((f.inputs.len(), f.outputs.len()), (5, 4));
        assert_eq!(
            f.addrs(),
            (outputs[5].addr(), inputs[6].addr(), inputs[7].addr(), inputs[8].addr(), inputs[9].addr())
        );
        let (c, s) = (&f.call.cache, &f.call.shape);
        assert_eq!((c.pages, c.layers, c.page_size, c.kv_heads, c.head_dim, f.call.layer), (3, 2, 2, 1, 4, 1));
        assert_eq!((s.tokens, s.heads, s.rot, s.positions, f.call.flags.interleaved), (1, 2, 4, 5, false));
    }

    #[test]
    fn a_strided_cache_and_missing_operands_are_errors() {
        let wide = empty(DType::Float32, &[3, 2, 2, 2, 2, 4]);
        let strided = wide
            .index(&[
                IndexItem::Ellipsis,
                IndexItem::Slice { start: Some(0), stop: Some(1), step: None },
                IndexItem::Slice { start: None, stop: None, step: None },
            ])
            .unwrap();
        assert!(!strided.is_contiguous());
        let (store, inputs, outputs) = step(strided);
        let e = FoldedStore::new(&store, &inputs, &outputs).err().unwrap().to_string();
        assert!(e.contains("contiguous"), "{e}");
        let (store, inputs, outputs) = step(empty(DType::Float32, &[3, 2, 2, 2, 1, 4]));
        assert!(FoldedStore::new(&store, &inputs[..4], &outputs).is_err());
        assert!(FoldedStore::new(&store, &inputs, &outputs[..1]).is_err());
    }
}
