//! kv_cache_store: writes each new token's key and value rows into its slot of the paged cache
//! (slot = page * page_size + offset), for one layer. Slots past the cache are an error and
//! nothing is written.

use max_graph::ops::Op;
use max_graph::ops::attention::{CacheLayout, KvStoreParams};

use super::{indices, slice, slice_mut, with_act};
use crate::{Buffer, Error, Result};

pub(super) fn run(op: &Op, blocks: &Buffer, k: &Buffer, v: &Buffer, slots: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let p = KvStoreParams::from_attrs(&op.attrs).map_err(|m| Error::Value(format!("{name}: {m}")))?;
    let c = CacheLayout::from_shape(blocks.shape()).map_err(|m| Error::Value(format!("{name}: {m}")))?;
    if p.layer >= c.layers {
        return Err(Error::Value(format!("{name}: layer {} of a cache of {} layers", p.layer, c.layers)));
    }
    let row = c.kv_heads * c.head_dim;
    let slots = indices(name, "slots", slots)?;
    for (what, t) in [("k", k), ("v", v)] {
        if t.shape() != [slots.len(), c.kv_heads, c.head_dim] {
            return Err(Error::Value(format!(
                "{name}: {what} has shape {:?}, expected [{}, {}, {}]",
                t.shape(),
                slots.len(),
                c.kv_heads,
                c.head_dim
            )));
        }
        if t.dtype() != blocks.dtype() {
            return Err(Error::Value(format!(
                "{name}: {what} is {} but the cache holds {}",
                t.dtype(),
                blocks.dtype()
            )));
        }
    }
    if let Some(&bad) = slots.iter().find(|&&s| s as usize >= c.pages * c.page_size) {
        return Err(Error::Value(format!(
            "{name}: slot {bad} is past the cache's {} pages of {} tokens",
            c.pages, c.page_size
        )));
    }
    with_act!(name, k.dtype(), T, {
        let cache = slice_mut::<T>(name, blocks)?;
        for (kv, src) in [(0, slice::<T>(name, k)?), (1, slice::<T>(name, v)?)] {
            for (i, &s) in slots.iter().enumerate() {
                let (page, off) = (s as usize / c.page_size, s as usize % c.page_size);
                let at = c.offset(page, kv, p.layer) + off * row;
                cache[at..at + row].copy_from_slice(&src[i * row..(i + 1) * row]);
            }
        }
        Ok(())
    })
}
