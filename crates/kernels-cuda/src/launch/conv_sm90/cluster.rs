//! Clusters of two CTAs for the 192-row tiles and the 128 x 64 ping-pong ones (the kernel's `_c2`
//! entries, see kernels/conv_sm90.cu): where they pay, and how many the device holds at once.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use max_graph::DType;

use super::super::sm_count;
use crate::sources::{CONV_SM90_PP_BF16, CONV_SM90_PP_F16};
use crate::{Result, function};

/// Whether clusters of two sharing A pay for 192-row tiles: where the blocks hold 1.5 tiles each
/// or more. Measured on an H200 (ResNet-50 batch 32, `benchmarks/gpu_conv2d.py --variants
/// one=conv.cluster=1 two=conv.cluster=2`, single CTAs / clusters, us):
/// 28x28 1x1 512 -> 256 (262 tiles) 15.4 / 13.8 (cuDNN 13.4); 14x14 256 -> 1024 (264) 10.3 /
/// 9.7; 28x28 512 -> 1024 stride 2 (264) 13.9 / 13.6; but 14x14 1024 -> 512 (132 tiles, one a
/// block) 11.5 / 11.9.
pub(super) fn cluster_pays(tiles: usize, sms: usize) -> bool {
    2 * tiles >= 3 * sms
}

/// Clusters of two CTAs of the 192-row kernel (`trio`: 512 threads) or the 128 x 64 ping-pong one
/// (384 threads) with `smem` bytes the device holds at once (cached per device), or 0 where the
/// driver cannot say or holds far fewer than one per SM pair (a persistent grid larger than that
/// would leave clusters waiting for a whole round).
pub(super) fn max_clusters(stream: &Arc<CudaStream>, dtype: DType, smem: u32, trio: bool) -> Result<usize> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    // (device, shared memory, 192-row form) -> clusters
    type Cache = HashMap<(usize, u32, bool), usize>;
    static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
    let key = (stream.context().ordinal(), smem, trio);
    if let Some(&v) = CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(v);
    }
    let family = if dtype == DType::BFloat16 { &CONV_SM90_PP_BF16 } else { &CONV_SM90_PP_F16 };
    let name = format!(
        "conv_sm90_{}_{}_plain_c2",
        if dtype == DType::BFloat16 { "bf16" } else { "f16" },
        if trio { "n128_t" } else { "n64_pp" }
    );
    let func = function(stream.context(), family, &name)?;
    crate::allow_smem(stream.context(), &func, smem)?;
    let sms = sm_count(stream)?;
    let threads = if trio { 512 } else { 384 };
    let v = match crate::launch::active_clusters(stream, &func, 2, sms / 2 * 2, (threads, smem)) {
        Some(count) if count * 4 >= sms / 2 * 3 => count.min(sms / 2),
        _ => 0,
    };
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(key, v);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_where_blocks_hold_one_and_a_half_tiles() {
        assert!(cluster_pays(262, 132));
        assert!(cluster_pays(264, 132));
        assert!(cluster_pays(198, 132));
        assert!(!cluster_pays(132, 132));
        assert!(!cluster_pays(197, 132));
    }
}
