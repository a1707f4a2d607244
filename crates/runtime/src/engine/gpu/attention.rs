//! GPU kernels of the attention family (rope, kv_cache_store, paged_attention) through
//! max_kernels_cuda::launch::attention. The shapes are checked here as the CPU kernels check
//! them (crates/runtime/src/cpu/attention defines the behaviour); the index tensors' values stay
//! on the device and are not read back (see attention.cu for what out-of-range values do).

use max_graph::DType;
use max_graph::ops::attention::{AttentionParams, CacheLayout, KvStoreParams, RopeParams};
use max_graph::ops::{Op, OpKind};
use max_kernels_cuda::launch::attention::{self as k, AttentionPtrs, RopeShape};

use crate::cuda::CudaDevice;
use crate::operands::{fits_cache, query_shape};
use crate::{Buffer, Error, Result};

fn packed(b: &Buffer) -> Result<Buffer> {
    if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() }
}

fn index(name: &str, what: &str, b: &Buffer, len: usize) -> Result<()> {
    if b.dtype() != DType::UInt32 || b.num_elements() != len {
        return Err(Error::Value(format!(
            "{name}: {what} must be {len} uint32 values, got {} {:?}",
            b.dtype(),
            b.shape()
        )));
    }
    Ok(())
}

fn attrs<T>(name: &str, r: std::result::Result<T, String>) -> Result<T> {
    r.map_err(|m| Error::Value(format!("{name}: {m}")))
}

fn layout(name: &str, blocks: &Buffer, dtype: DType) -> Result<CacheLayout> {
    if blocks.dtype() != dtype {
        return Err(Error::Value(format!(
            "{name}: the cache holds {} but the activations are {dtype}",
            blocks.dtype()
        )));
    }
    CacheLayout::from_shape(blocks.shape()).map_err(|m| Error::Value(format!("{name}: {m}")))
}

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let inputs: Vec<Buffer> = inputs.iter().map(packed).collect::<Result<_>>()?;
    dev.bind()?;
    match (op.kind, inputs.as_slice(), outputs) {
        (OpKind::Rope, [x, freqs, positions], [out]) => {
            let p: RopeParams = attrs(name, RopeParams::from_attrs(&op.attrs))?;
            let (&[tokens, heads, dim], &[npos, rot]) = (x.shape(), freqs.shape()) else {
                return Err(Error::Value(format!(
                    "{name}: x must be [tokens, heads, dim] and freqs_cis [positions, rot]"
                )));
            };
            if rot % 2 != 0 || rot > dim || rot == 0 {
                return Err(Error::Value(format!("{name}: rotary dim {rot} must be even, positive and at most {dim}")));
            }
            index(name, "positions", positions, tokens)?;
            let freqs_f32 = freqs.dtype() == DType::Float32;
            if !freqs_f32 && freqs.dtype() != x.dtype() {
                return Err(Error::Value(format!("{name}: freqs_cis must be float32 or {}", x.dtype())));
            }
            let shape = RopeShape { tokens, heads, dim, rot, positions: npos };
            let ptrs = (x.addr(), freqs.addr(), positions.addr(), out.addr());
            k::rope(&dev.stream, x.dtype(), ptrs, shape, p.interleaved, freqs_f32).map_err(Error::from)
        }
        (OpKind::KvCacheStore, [_, blocks, kk, v, slots, q, freqs, positions], [_, q_out]) => {
            let c = rope_store_call(op, [blocks, kk, v, slots, q, freqs, positions], q_out)?;
            k::rope_kv_store(&dev.stream, q.dtype(), c.ptrs, c.shape, c.cache, c.layer, c.flags).map_err(Error::from)
        }
        (OpKind::KvCacheStore, [_, blocks, kk, v, slots], _) => {
            let p: KvStoreParams = attrs(name, KvStoreParams::from_attrs(&op.attrs))?;
            let c = layout(name, blocks, kk.dtype())?;
            let tokens = slots.num_elements();
            index(name, "slots", slots, tokens)?;
            for (what, t) in [("k", kk), ("v", v)] {
                if t.shape() != [tokens, c.kv_heads, c.head_dim] || t.dtype() != blocks.dtype() {
                    return Err(Error::Value(format!(
                        "{name}: {what} is {} {:?}, which does not fit the cache",
                        t.dtype(),
                        t.shape()
                    )));
                }
            }
            if p.layer >= c.layers {
                return Err(Error::Value(format!("{name}: layer {} of a cache of {} layers", p.layer, c.layers)));
            }
            let ptrs = (blocks.addr(), kk.addr(), v.addr(), slots.addr());
            k::kv_cache_store(&dev.stream, kk.dtype(), ptrs, c, tokens, p.layer).map_err(Error::from)
        }
        (OpKind::PagedAttention, [_, q, blocks, offsets, lengths, table], [out, ..]) => {
            let p: AttentionParams = attrs(name, AttentionParams::from_attrs(&op.attrs))?;
            let c = layout(name, blocks, q.dtype())?;
            let [tokens, q_heads, dim] = query_shape(name, q)?;
            if !fits_cache(&c, q_heads, dim, p.layer) {
                return Err(Error::Value(format!(
                    "{name}: q {:?} does not fit the cache {:?} (layer {})",
                    q.shape(),
                    blocks.shape(),
                    p.layer
                )));
            }
            let batch = offsets
                .num_elements()
                .checked_sub(1)
                .ok_or_else(|| Error::Value(format!("{name}: input_row_offsets is empty")))?;
            index(name, "cache_lengths", lengths, batch)?;
            let &[rows, width] = table.shape() else {
                return Err(Error::Value(format!(
                    "{name}: lookup_table must be [batch, pages], got {:?}",
                    table.shape()
                )));
            };
            index(name, "lookup_table", table, batch * width)?;
            index(name, "input_row_offsets", offsets, batch + 1)?;
            if rows != batch {
                return Err(Error::Value(format!("{name}: lookup_table has {rows} rows for {batch} sequences")));
            }
            let bytes = k::scratch_bytes(
                q.dtype(),
                &c,
                (tokens, q_heads, batch, width),
                (q.addr(), blocks.addr(), out.addr()),
                p.f32_as_bf16,
            );
            // the stream's workspace (launch/scratch.rs), or memory of its own where that has none
            let shared =
                if bytes > 0 { max_kernels_cuda::launch::scratch::for_stream(&dev.stream, bytes)? } else { None };
            let scratch = Some(bytes)
                .filter(|&bytes| bytes > 0 && shared.is_none())
                .map(|bytes| Buffer::empty_on(DType::UInt8, &[bytes as i64], out.stream()))
                .transpose()?;
            let ptrs = AttentionPtrs {
                q: q.addr(),
                blocks: blocks.addr(),
                offsets: offsets.addr(),
                lengths: lengths.addr(),
                table: table.addr(),
                out: out.addr(),
                partial: shared.or(scratch.as_ref().map(|b| b.addr())).unwrap_or(0),
            };
            k::paged_attention(&dev.stream, q.dtype(), ptrs, c, &p, (tokens, q_heads, batch, width))
                .map_err(Error::from)
        }
        _ => Err(Error::Value(format!("{name}: unexpected inputs or outputs for this op"))),
    }
}

/// A kv_cache_store with its rope folded in, checked (as the CPU checks it): what its launch
/// takes. Also the rope + store folded into q/k/v products (quant.rs), whose outputs come as
/// views of q's, k's and v's shapes.
pub(crate) struct RopeStoreCall {
    pub ptrs: k::RopeStorePtrs,
    pub shape: RopeShape,
    pub cache: CacheLayout,
    pub layer: usize,
    pub flags: k::RopeStoreFlags,
}

pub(crate) fn rope_store_call(
    op: &Op,
    [blocks, kk, v, slots, q, freqs, positions]: [&Buffer; 7],
    q_out: &Buffer,
) -> Result<RopeStoreCall> {
    let name = op.kind.name();
    let p: KvStoreParams = attrs(name, KvStoreParams::from_attrs(&op.attrs))?;
    let Some(rope) = p.rope else {
        return Err(Error::Value(format!("{name}: q, freqs_cis and positions come only with a folded rope")));
    };
    let c = layout(name, blocks, kk.dtype())?;
    let tokens = slots.num_elements();
    index(name, "slots", slots, tokens)?;
    index(name, "positions", positions, tokens)?;
    let &[_, q_heads, _] = q.shape() else {
        return Err(Error::Value(format!("{name}: q must be [tokens, heads, dim], got {:?}", q.shape())));
    };
    let kv = [tokens, c.kv_heads, c.head_dim];
    for (what, t, shape) in [("k", kk, kv), ("v", v, kv), ("q", q, [tokens, q_heads, c.head_dim])] {
        if t.shape() != shape || t.dtype() != blocks.dtype() {
            return Err(Error::Value(format!(
                "{name}: {what} is {} {:?}, which does not fit the cache",
                t.dtype(),
                t.shape()
            )));
        }
    }
    if q_out.shape() != q.shape() || q_out.dtype() != q.dtype() {
        return Err(Error::Value(format!("{name}: rope(q) is {:?}, q {:?}", q_out.shape(), q.shape())));
    }
    let &[npos, rot] = freqs.shape() else {
        return Err(Error::Value(format!("{name}: freqs_cis must be [positions, rot]")));
    };
    if rot % 2 != 0 || rot > c.head_dim || rot == 0 {
        return Err(Error::Value(format!(
            "{name}: rotary dim {rot} must be even, positive and at most {}",
            c.head_dim
        )));
    }
    let freqs_f32 = freqs.dtype() == DType::Float32;
    if !freqs_f32 && freqs.dtype() != q.dtype() {
        return Err(Error::Value(format!("{name}: freqs_cis must be float32 or {}", q.dtype())));
    }
    if p.layer >= c.layers {
        return Err(Error::Value(format!("{name}: layer {} of a cache of {} layers", p.layer, c.layers)));
    }
    let shape = RopeShape { tokens, heads: q_heads, dim: c.head_dim, rot, positions: npos };
    let ptrs = k::RopeStorePtrs {
        q: q.addr(),
        q_out: q_out.addr(),
        k: kk.addr(),
        v: v.addr(),
        blocks: blocks.addr(),
        slots: slots.addr(),
        freqs: freqs.addr(),
        positions: positions.addr(),
    };
    let flags = k::RopeStoreFlags { interleaved: rope.interleaved, freqs_f32, early_next: p.early_next };
    Ok(RopeStoreCall { ptrs, shape, cache: c, layer: p.layer, flags })
}
