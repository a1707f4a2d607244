//! The query checks of paged_attention, shared by the host and CUDA kernels.

use max_graph::ops::attention::CacheLayout;

use crate::{Buffer, Error, Result};

/// The query's `[tokens, heads, head_dim]`.
pub(crate) fn query_shape(name: &str, q: &Buffer) -> Result<[usize; 3]> {
    match *q.shape() {
        [tokens, heads, dim] => Ok([tokens, heads, dim]),
        _ => Err(Error::Value(format!("{name}: q must be [tokens, heads, head_dim], got {:?}", q.shape()))),
    }
}

/// Whether `heads` query heads of `dim` values read layer `layer` of cache `c` (a whole number
/// of query heads per kv head).
pub(crate) fn fits_cache(c: &CacheLayout, heads: usize, dim: usize, layer: usize) -> bool {
    dim == c.head_dim && c.kv_heads != 0 && heads.is_multiple_of(c.kv_heads) && layer < c.layers
}
