//! The ops of a transformer's attention over a paged KV cache: rotary position embeddings,
//! writing new keys and values into the cache, and attention over the cache.
//!
//! The cache is one buffer of shape `[pages, 2, layers, page_size, kv_heads, head_dim]`
//! (MAX's paged layout): page `p` holds `page_size` consecutive tokens of one sequence, keys at
//! index 0 and values at index 1 of its second axis, for every layer. A batch is ragged: its
//! new tokens are concatenated along the first axis of `q`/`k`/`v` and `input_row_offsets`
//! (`[batch + 1]`) says where each sequence's rows start. Index tensors are uint32.
//!
//! - `rope(x [T, H, D], freqs_cis [S, R], positions [T])`: rotates the first `R` (even, <= D)
//!   dims of every head of row `t` by the angles of row `positions[t]` of `freqs_cis`, which
//!   holds `(cos, sin)` pairs side by side. `interleaved` (bool): pairs are adjacent dims
//!   (2i, 2i+1); otherwise dim i pairs with dim i + R/2 (the "half-split" layout of Hugging
//!   Face checkpoints).
//! - `kv_cache_store(chain, blocks, k [T, Hkv, D], v [T, Hkv, D], slots [T])`: writes token
//!   `t`'s key and value at `slots[t]` = page * page_size + offset, for layer `layer`. Returns
//!   a chain.
//! - `paged_attention(chain, q [T, Hq, D], blocks, input_row_offsets [B+1], cache_lengths [B],
//!   lookup_table [B, P])`: sequence `b`'s queries are rows `offsets[b]..offsets[b+1]` at
//!   positions `cache_lengths[b] + i`; its keys are positions `0..cache_lengths[b] + q_len`
//!   found through the page ids of `lookup_table[b]` (a page id at or past the cache's pages
//!   holds no keys: its positions are left out, a way to mask keys). Query head `h` reads kv head
//!   `h / (Hq / Hkv)`. Returns `[T, Hq, D]` and a chain. Attributes: `layer`, `scale`,
//!   `mask` ("causal", "sliding_window" with `window`, or "null" for no mask over the whole
//!   cached sequence) and `softcap` (tanh soft-capping of the scores, 0 for none).

use super::control::expect_chain;
use super::{Ctx, OpKind};
use crate::attrs::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

/// The dtypes of attention activations and of the cache.
pub fn attention_dtype(d: DType) -> bool {
    matches!(d, DType::Float32 | DType::Float16 | DType::BFloat16)
}

fn int_attr(attrs: &Attrs, key: &str) -> std::result::Result<i64, String> {
    match attrs.get(key) {
        Some(Attr::Int(i)) => Ok(*i),
        Some(other) => Err(format!("{key}: expected an integer, got {other}")),
        None => Err(format!("{key}: missing integer")),
    }
}

fn float_attr(attrs: &Attrs, key: &str, default: Option<f64>) -> std::result::Result<f64, String> {
    match (attrs.get(key), default) {
        (Some(Attr::Float(x)), _) => Ok(*x),
        (Some(Attr::Int(i)), _) => Ok(*i as f64),
        (Some(other), _) => Err(format!("{key}: expected a number, got {other}")),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(format!("{key}: missing number")),
    }
}

/// A flag, `default` when absent.
fn bool_attr(attrs: &Attrs, key: &str, default: bool) -> std::result::Result<bool, String> {
    match attrs.get(key) {
        None => Ok(default),
        Some(Attr::Bool(b)) => Ok(*b),
        Some(other) => Err(format!("{key}: expected a bool, got {other}")),
    }
}

/// rope's attribute.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub interleaved: bool,
}

impl RopeParams {
    pub fn from_attrs(attrs: &Attrs) -> std::result::Result<RopeParams, String> {
        Ok(RopeParams { interleaved: bool_attr(attrs, "interleaved", true)? })
    }
}

/// kv_cache_store's attributes: the layer whose keys and values are written, and the rotary
/// embedding the engine folds into the store (its pass fuse_rope_store; never staged by users):
/// then the inputs go on with `[q, freqs_cis, positions]` after the slots, the keys are stored
/// rotated as rope would rotate them, and the second result is rope(q).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvStoreParams {
    pub layer: usize,
    pub rope: Option<RopeParams>,
    /// Set by the engine (attribute [`EARLY_NEXT`]) on a store with its rope folded in: the next
    /// kernel of its stream is a paged_attention with [`AttentionParams::early_index`] over the
    /// same cache, and the kernel before the store is one of its program that does not touch
    /// the cache, so the store may let that attention launch before it waits itself.
    pub early_next: bool,
}

/// The attribute that marks a kv_cache_store with its rope folded in (its value: `interleaved`).
pub const STORE_ROPE: &str = "rope_interleaved";

/// The attribute the engine sets on a store whose next kernel may launch before the store's
/// own wait (see [`KvStoreParams::early_next`]).
pub const EARLY_NEXT: &str = "early_next";

impl KvStoreParams {
    pub fn from_attrs(attrs: &Attrs) -> std::result::Result<KvStoreParams, String> {
        let layer = int_attr(attrs, "layer")?;
        let layer = usize::try_from(layer).map_err(|_| format!("layer: must not be negative, got {layer}"))?;
        let rope = match attrs.get(STORE_ROPE) {
            None => None,
            Some(Attr::Bool(interleaved)) => Some(RopeParams { interleaved: *interleaved }),
            Some(other) => return Err(format!("{STORE_ROPE}: expected a bool, got {other}")),
        };
        let early_next = bool_attr(attrs, EARLY_NEXT, false)?;
        Ok(KvStoreParams { layer, rope, early_next })
    }
}

/// Which cached positions a query attends to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mask {
    /// Positions up to and including the query's own.
    Causal,
    /// The last `window` positions up to and including the query's own.
    SlidingWindow(usize),
    /// Every position of the sequence (an encoder).
    Null,
}

impl Mask {
    /// The first key position a query at `pos` sees, and one past the last, for a sequence of
    /// `len` cached positions.
    pub fn range(self, pos: usize, len: usize) -> (usize, usize) {
        match self {
            Mask::Causal => (0, (pos + 1).min(len)),
            Mask::SlidingWindow(w) => ((pos + 1).saturating_sub(w), (pos + 1).min(len)),
            Mask::Null => (0, len),
        }
    }
}

/// paged_attention's attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    pub layer: usize,
    pub scale: f32,
    pub mask: Mask,
    /// tanh soft-capping of the scores (`cap * tanh(s / cap)`), 0 for none.
    pub softcap: f32,
    /// Set by the engine (attribute [`EARLY_INDEX`]): no kernel of the program writes the row
    /// offsets, cache lengths or lookup table, and a kernel of the program runs before this op,
    /// so a kernel may read them before it waits for the previous kernel of its stream, and the
    /// keys below a sequence's cached length too (stored by earlier steps; a step stores its
    /// rows at the cached length and past it).
    pub early_index: bool,
    /// f32 queries, keys and values may be read as bf16 (attribute [`F32_AS_BF16`]; on a GPU
    /// the tensor-core decode kernel takes them): for models whose products carry bf16's error
    /// anyway (quantized projections). Without it f32 attention keeps f32 products.
    pub f32_as_bf16: bool,
}

/// The attribute the engine sets on a paged_attention whose row offsets, cache lengths and
/// lookup table are program inputs no kernel writes, and that follows a kernel of its program
/// (see [`AttentionParams::early_index`]).
pub const EARLY_INDEX: &str = "early_index";

/// paged_attention's attribute allowing f32 inputs to be read as bf16 (see
/// [`AttentionParams::f32_as_bf16`]).
pub const F32_AS_BF16: &str = "f32_as_bf16";

impl AttentionParams {
    pub fn from_attrs(attrs: &Attrs) -> std::result::Result<AttentionParams, String> {
        let KvStoreParams { layer, .. } = KvStoreParams::from_attrs(attrs)?;
        let scale = float_attr(attrs, "scale", None)?;
        if !scale.is_finite() || scale <= 0.0 {
            return Err(format!("scale: must be a positive number, got {scale}"));
        }
        let softcap = float_attr(attrs, "softcap", Some(0.0))?;
        if !softcap.is_finite() || softcap < 0.0 {
            return Err(format!("softcap: must be 0 (none) or positive, got {softcap}"));
        }
        let mask = match attrs.get("mask") {
            None => Mask::Causal,
            Some(Attr::Str(s)) => match s.as_str() {
                "causal" => Mask::Causal,
                "null" => Mask::Null,
                "sliding_window" => {
                    let w = int_attr(attrs, "window")?;
                    if w < 1 {
                        return Err(format!("window: a sliding window must hold at least 1 position, got {w}"));
                    }
                    Mask::SlidingWindow(w as usize)
                }
                other => {
                    return Err(format!("mask: unknown mask {other:?} (expected causal, sliding_window or null)"));
                }
            },
            Some(other) => return Err(format!("mask: expected a string, got {other}")),
        };
        let early_index = bool_attr(attrs, EARLY_INDEX, false)?;
        let f32_as_bf16 = bool_attr(attrs, F32_AS_BF16, false)?;
        Ok(AttentionParams { layer, scale: scale as f32, mask, softcap: softcap as f32, early_index, f32_as_bf16 })
    }
}

/// The geometry of a paged cache buffer `[pages, 2, layers, page_size, kv_heads, head_dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLayout {
    pub pages: usize,
    pub layers: usize,
    pub page_size: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl CacheLayout {
    pub fn from_shape(shape: &[usize]) -> std::result::Result<CacheLayout, String> {
        match *shape {
            [pages, 2, layers, page_size, kv_heads, head_dim] => {
                Ok(CacheLayout { pages, layers, page_size, kv_heads, head_dim })
            }
            _ => Err(format!("blocks: expected [pages, 2, layers, page_size, kv_heads, head_dim], got {shape:?}")),
        }
    }

    /// Elements of one page of one layer's keys (or values).
    pub fn page_elems(&self) -> usize {
        self.page_size * self.kv_heads * self.head_dim
    }

    /// Element offset of the keys (`kv` 0) or values (1) of `layer` in page `page`.
    pub fn offset(&self, page: usize, kv: usize, layer: usize) -> usize {
        ((page * 2 + kv) * self.layers + layer) * self.page_elems()
    }
}

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::Rope => rope(ctx),
        OpKind::KvCacheStore => kv_cache_store(ctx),
        OpKind::PagedAttention => paged_attention(ctx),
        _ => Err(ctx.value_err("op", "not an attention op")),
    }
}

fn params<T>(ctx: &Ctx, r: std::result::Result<T, String>) -> Result<T> {
    r.map_err(|m| match m.split_once(": ") {
        Some((key, msg)) => ctx.value_err(key, msg),
        None => ctx.value_err("attributes", m),
    })
}

fn activation<'a>(ctx: &Ctx<'a>, i: usize, rank: usize) -> Result<&'a TensorType> {
    ctx.tensor_with(i, attention_dtype, "float32, float16 or bfloat16", rank, &format!("of rank {rank}"))
}

fn index<'a>(ctx: &Ctx<'a>, i: usize, rank: usize) -> Result<&'a TensorType> {
    ctx.tensor_with(i, |d| d == DType::UInt32, "uint32", rank, &format!("of rank {rank}"))
}

fn rope(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(3)?;
    params(ctx, RopeParams::from_attrs(ctx.attrs))?;
    let x = activation(ctx, 0, 3)?;
    let freqs = ctx.tensor(1)?;
    if freqs.dtype != DType::Float32 && freqs.dtype != x.dtype {
        return Err(
            ctx.type_err("freqs_cis", format!("must be float32 or the input's {}, got {}", x.dtype, freqs.dtype))
        );
    }
    if freqs.rank() != 2 {
        return Err(
            ctx.value_err("freqs_cis", format!("must be [positions, rotary_dim], got {}", shape_str(&freqs.shape)))
        );
    }
    if let (Some(r), Some(d)) = (freqs.shape[1].as_static(), x.shape[2].as_static())
        && (r % 2 != 0 || r > d || r == 0)
    {
        return Err(ctx.value_err(
            "freqs_cis",
            format!("its rotary dim {r} must be even, positive and at most the head dim {d}"),
        ));
    }
    let positions = index(ctx, 2, 1)?;
    ctx.same_dim("positions", "one position per row", &positions.shape[0], &x.shape[0])?;
    ctx.same_device(&[0, 1, 2])?;
    Ok(vec![Type::Tensor(x.clone())])
}

fn blocks<'a>(ctx: &Ctx<'a>, i: usize, dtype: DType) -> Result<&'a TensorType> {
    let b = ctx.buffer(i)?;
    if b.rank() != 6 || b.shape[1].as_static().is_some_and(|n| n != 2) {
        return Err(ctx.value_err(
            "blocks",
            format!("must be [pages, 2, layers, page_size, kv_heads, head_dim], got {}", shape_str(&b.shape)),
        ));
    }
    if b.dtype != dtype {
        return Err(ctx.type_err("blocks", format!("holds {} but the activations are {dtype}", b.dtype)));
    }
    Ok(b)
}

fn check_layer(ctx: &Ctx, b: &TensorType, layer: usize) -> Result<()> {
    if let Some(n) = b.shape[2].as_static()
        && layer as i64 >= n
    {
        return Err(ctx.index_err("layer", format!("layer {layer} is out of range for a cache of {n} layers")));
    }
    Ok(())
}

fn kv_cache_store(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(5)?;
    expect_chain(ctx, 0)?;
    let p = params(ctx, KvStoreParams::from_attrs(ctx.attrs))?;
    let k = activation(ctx, 2, 3)?;
    let b = blocks(ctx, 1, k.dtype)?;
    let v = activation(ctx, 3, 3)?;
    if v.dtype != k.dtype {
        return Err(ctx.type_err("v", format!("has dtype {} but k has {}", v.dtype, k.dtype)));
    }
    for (i, name) in [(2, "k"), (3, "v")] {
        let t = ctx.tensor(i)?;
        ctx.same_dim(name, "tokens", &t.shape[0], &k.shape[0])?;
        ctx.same_dim(name, "kv heads", &t.shape[1], &b.shape[4])?;
        ctx.same_dim(name, "head dim", &t.shape[2], &b.shape[5])?;
    }
    let slots = index(ctx, 4, 1)?;
    ctx.same_dim("slots", "one slot per token", &slots.shape[0], &k.shape[0])?;
    check_layer(ctx, b, p.layer)?;
    ctx.same_device(&[1, 2, 3, 4])?;
    Ok(vec![Type::Chain])
}

fn paged_attention(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(6)?;
    expect_chain(ctx, 0)?;
    let p = params(ctx, AttentionParams::from_attrs(ctx.attrs))?;
    let q = activation(ctx, 1, 3)?;
    let b = blocks(ctx, 2, q.dtype)?;
    ctx.same_dim("q", "head dim", &q.shape[2], &b.shape[5])?;
    if let (Some(hq), Some(hkv)) = (q.shape[1].as_static(), b.shape[4].as_static())
        && (hkv == 0 || hq % hkv != 0)
    {
        return Err(ctx.value_err("q", format!("its {hq} heads are not a multiple of the cache's {hkv} kv heads")));
    }
    let offsets = index(ctx, 3, 1)?;
    let lengths = index(ctx, 4, 1)?;
    let table = index(ctx, 5, 2)?;
    let batch = offsets.shape[0].sub(&Dim::stat(1)).map_err(|e| ctx.value_err("input_row_offsets", e.to_string()))?;
    ctx.same_dim("cache_lengths", "one length per sequence", &lengths.shape[0], &batch)?;
    ctx.same_dim("lookup_table", "one row per sequence", &table.shape[0], &batch)?;
    check_layer(ctx, b, p.layer)?;
    ctx.same_device(&[1, 2, 3, 4, 5])?;
    Ok(vec![Type::Tensor(q.clone()), Type::Chain])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::GraphError;
    use crate::ops::testing::{buf, infer_with as run, tt as t};

    fn msg(e: GraphError) -> String {
        e.to_string()
    }

    #[test]
    fn rope_keeps_the_type_and_checks_its_tables() {
        let x = t(DType::BFloat16, &["T", "4", "64"]);
        let freqs = t(DType::Float32, &["512", "64"]);
        let pos = t(DType::UInt32, &["T"]);
        let a = Attrs::new().with("interleaved", Attr::Bool(false));
        assert_eq!(run(OpKind::Rope, a.clone(), &[x.clone(), freqs, pos.clone()]).unwrap(), vec![x.clone()]);
        let odd = t(DType::Float32, &["512", "63"]);
        let e = msg(run(OpKind::Rope, a.clone(), &[x.clone(), odd, pos.clone()]).unwrap_err());
        assert!(e.starts_with("rope: freqs_cis:") && e.contains("must be even"), "{e}");
        let e =
            msg(run(OpKind::Rope, a, &[x, t(DType::Float32, &["512", "64"]), t(DType::Int64, &["T"])]).unwrap_err());
        assert!(e.starts_with("rope: positions: must be uint32"), "{e}");
    }

    #[test]
    fn store_and_attention_check_the_cache() {
        let blocks = buf(DType::Float32, &["pages", "2", "3", "128", "2", "16"]);
        let k = t(DType::Float32, &["T", "2", "16"]);
        let slots = t(DType::UInt32, &["T"]);
        let store = |layer: i64| Attrs::new().with("layer", Attr::Int(layer));
        let out =
            run(OpKind::KvCacheStore, store(2), &[Type::Chain, blocks.clone(), k.clone(), k.clone(), slots.clone()])
                .unwrap();
        assert_eq!(out, vec![Type::Chain]);
        let e = msg(run(
            OpKind::KvCacheStore,
            store(3),
            &[Type::Chain, blocks.clone(), k.clone(), k.clone(), slots.clone()],
        )
        .unwrap_err());
        assert!(e.starts_with("kv_cache_store: layer:") && e.contains("out of range"), "{e}");
        let wrong = t(DType::Float32, &["T", "3", "16"]);
        let e =
            msg(run(OpKind::KvCacheStore, store(0), &[Type::Chain, blocks.clone(), wrong, k.clone(), slots])
                .unwrap_err());
        assert!(e.starts_with("kv_cache_store: k: kv heads"), "{e}");

        let q = t(DType::Float32, &["T", "6", "16"]);
        let offsets = t(DType::UInt32, &["B1"]);
        let lengths = t(DType::UInt32, &["B"]);
        let table = t(DType::UInt32, &["B", "8"]);
        let attn = |mask: &str| {
            Attrs::new()
                .with("layer", Attr::Int(1))
                .with("scale", Attr::Float(0.25))
                .with("mask", Attr::Str(mask.into()))
                .with("window", Attr::Int(4))
        };
        let inputs = [Type::Chain, q.clone(), blocks.clone(), offsets, lengths, table];
        let out = run(OpKind::PagedAttention, attn("sliding_window"), &inputs).unwrap();
        assert_eq!(out, vec![q, Type::Chain]);
        let e = msg(run(OpKind::PagedAttention, attn("bidirectional"), &inputs).unwrap_err());
        assert!(e.starts_with("paged_attention: mask: unknown mask"), "{e}");
        let mut bad = inputs.clone();
        bad[1] = t(DType::Float32, &["T", "5", "16"]);
        let e = msg(run(OpKind::PagedAttention, attn("causal"), &bad).unwrap_err());
        assert!(e.contains("not a multiple of the cache's 2 kv heads"), "{e}");
    }

    #[test]
    fn masks_give_key_ranges() {
        assert_eq!(Mask::Causal.range(4, 10), (0, 5));
        assert_eq!(Mask::SlidingWindow(3).range(4, 10), (2, 5));
        assert_eq!(Mask::SlidingWindow(8).range(2, 10), (0, 3));
        assert_eq!(Mask::Null.range(4, 10), (0, 10));
    }
}
