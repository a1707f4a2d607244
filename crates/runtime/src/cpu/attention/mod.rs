//! Host kernels of the attention family (crates/graph/src/ops/attention.rs): rope,
//! kv_cache_store and paged_attention. Activations and the cache are float32, float16 or
//! bfloat16; everything computes in f32. These are also the references of the CUDA kernels.

mod paged;
#[cfg(target_arch = "x86_64")]
mod paged_avx2;
mod rope;
mod store;
#[cfg(test)]
pub(crate) mod tests;

use half::{bf16, f16};
use max_graph::DType;
use max_graph::ops::{Op, OpKind};

use crate::{Buffer, Error, Result};

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let inputs: Vec<Buffer> =
        inputs.iter().map(|b| if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() }).collect::<Result<_>>()?;
    match (op.kind, inputs.as_slice(), outputs) {
        (OpKind::Rope, [x, freqs, positions], [out]) => rope::run(op, x, freqs, positions, out),
        (OpKind::KvCacheStore, [_, blocks, k, v, slots], _) => store::run(op, blocks, k, v, slots),
        // A store with its rope folded in (the engine's pass fuse_rope_store): the ropes, then
        // the store, as the unfused steps run.
        (OpKind::KvCacheStore, [_, blocks, k, v, slots, q, freqs, positions], [_, q_out]) => {
            let p = max_graph::ops::attention::KvStoreParams::from_attrs(&op.attrs)
                .map_err(|m| Error::Value(format!("{name}: {m}")))?;
            let Some(rope) = p.rope else {
                return Err(Error::Value(format!("{name}: q, freqs_cis and positions come only with a folded rope")));
            };
            let attrs = max_graph::attrs::Attrs::new().with("interleaved", max_graph::Attr::Bool(rope.interleaved));
            let rope_op = Op { kind: OpKind::Rope, attrs };
            let dims: Vec<i64> = k.shape().iter().map(|&d| d as i64).collect();
            let k_rot = Buffer::for_result(k.dtype(), &dims, &crate::Device::Cpu)?;
            rope::run(&rope_op, k, freqs, positions, &k_rot)?;
            rope::run(&rope_op, q, freqs, positions, q_out)?;
            store::run(op, blocks, &k_rot, v, slots)
        }
        (OpKind::PagedAttention, [_, q, blocks, offsets, lengths, table], [out, ..]) => {
            paged::run(op, q, blocks, offsets, lengths, table, out)
        }
        _ => Err(Error::Value(format!("{name}: unexpected inputs or outputs for this op"))),
    }
}

/// The activation element types, loaded to and stored from f32.
pub(crate) trait Act: Copy + Send + Sync + 'static {
    fn load(self) -> f32;
    fn store(v: f32) -> Self;
}

impl Act for f32 {
    #[inline]
    fn load(self) -> f32 {
        self
    }
    #[inline]
    fn store(v: f32) -> Self {
        v
    }
}

impl Act for f16 {
    #[inline]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline]
    fn store(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Act for bf16 {
    #[inline]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline]
    fn store(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Runs `$body` with `$t` bound to the element type of `$dtype`.
macro_rules! with_act {
    ($name:expr, $dtype:expr, $t:ident, $body:expr) => {
        match $dtype {
            max_graph::DType::Float32 => {
                type $t = f32;
                $body
            }
            max_graph::DType::Float16 => {
                type $t = half::f16;
                $body
            }
            max_graph::DType::BFloat16 => {
                type $t = half::bf16;
                $body
            }
            other => Err(crate::Error::Value(format!("{}: unsupported dtype {other}", $name))),
        }
    };
}
pub(crate) use with_act;

/// A host buffer's elements as a slice of `T` (its dtype's element type).
pub(crate) fn slice<'a, T>(name: &str, b: &'a Buffer) -> Result<&'a [T]> {
    check::<T>(name, b)?;
    if b.num_elements() == 0 {
        return Ok(&[]); // an empty buffer's address may be null, which no slice may hold
    }
    // SAFETY: a contiguous host buffer of num_elements() elements of T's size, aligned (checked).
    Ok(unsafe { std::slice::from_raw_parts(b.addr() as *const T, b.num_elements()) })
}

/// A host buffer's elements for writing. The caller must be the only writer of `b` while the
/// slice lives (an op's own output, or the cache buffer an op writes in place).
#[allow(clippy::mut_from_ref)]
pub(crate) fn slice_mut<'a, T>(name: &str, b: &'a Buffer) -> Result<&'a mut [T]> {
    check::<T>(name, b)?;
    if b.num_elements() == 0 {
        return Ok(&mut []); // as in `slice`
    }
    // SAFETY: as in `slice`; exclusivity is the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(b.addr() as *mut T, b.num_elements()) })
}

fn check<T>(name: &str, b: &Buffer) -> Result<()> {
    if b.dtype().size_in_bytes() != size_of::<T>() || !b.is_contiguous() || !b.device().is_host() {
        return Err(Error::Value(format!(
            "{name}: expected a contiguous host tensor of {}-byte elements",
            size_of::<T>()
        )));
    }
    if b.num_elements() > 0 && !(b.addr() as usize).is_multiple_of(align_of::<T>()) {
        return Err(Error::Value(format!("{name}: a {} tensor is not aligned to its element size", b.dtype())));
    }
    Ok(())
}

/// The uint32 values of an index tensor.
pub(crate) fn indices<'a>(name: &str, what: &str, b: &'a Buffer) -> Result<&'a [u32]> {
    if b.dtype() != DType::UInt32 {
        return Err(Error::Value(format!("{name}: {what} must be uint32, got {}", b.dtype())));
    }
    slice::<u32>(name, b)
}
