//! Launching random.cu: random_uniform and random_normal over a contiguous output, one thread
//! per Philox block (4 elements, 2 for float64) in a grid-stride loop. [`select`] is the whole
//! launch decision (pure: the kernel by distribution and dtype, the grid by the block count
//! and the SM count); [`launch`] only runs it.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;
use max_graph::ops::random::Recipe;

use super::sm_count;
use crate::sources::RANDOM;
use crate::{Error, Result, function};

/// The kernels' dtype suffixes.
const SUFFIXES: [&str; 6] = ["f32", "f16", "bf16", "f64", "f8e4m3fn", "f8e5m2"];

/// Threads per block.
const THREADS: u32 = 256;
/// Blocks per SM that keep the memory system busy; the grid-stride loop covers the rest.
const BLOCKS_PER_SM: usize = 8;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RandomArgs {
    out: u64,
    seed: u64,
    n: u64,
    stream: u64,
    offset: f64,
    scale: f64,
    lo: f64,
    hi: f64,
}
// SAFETY: plain-old-data with the layout of the kernel's `RandomArgs`.
unsafe impl DeviceRepr for RandomArgs {}

/// One random op's work: `n` elements of `dtype` with the recipe of its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    pub recipe: Recipe,
    pub dtype: DType,
    pub n: usize,
}

/// The kernel and grid of a [`Problem`] on a GPU with `sms` SMs; `None` when there is nothing
/// to write.
pub fn select(p: &Problem, sms: usize) -> Result<Option<(String, LaunchConfig)>> {
    let suffix = match p.dtype {
        DType::Float32
        | DType::Float16
        | DType::BFloat16
        | DType::Float64
        | DType::Float8E4m3fn
        | DType::Float8E5m2 => super::cast_name(p.dtype).unwrap_or_default(),
        other => return Err(Error::Unsupported(format!("random values of {other} are not supported on the GPU"))),
    };
    if (p.dtype == DType::Float64) != p.recipe.wide {
        return Err(Error::Unsupported(format!("a random recipe for the wrong arithmetic for {}", p.dtype)));
    }
    if p.n == 0 {
        return Ok(None);
    }
    let kind = if p.recipe.normal { "normal" } else { "uniform" };
    let blocks = p.n.div_ceil(p.recipe.per_block());
    let grid = blocks.div_ceil(THREADS as usize).clamp(1, sms.max(1) * BLOCKS_PER_SM) as u32;
    let config = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
    Ok(Some((format!("random_{kind}_{suffix}"), config)))
}

/// Writes the `p.n` values at `out` (device memory) with the seed at `seed` (one 8-byte value in
/// device memory) and stream `stream`.
pub fn launch(stream: &Arc<CudaStream>, p: &Problem, out: u64, seed: u64, philox_stream: u64) -> Result<()> {
    let Some((name, config)) = select(p, sm_count(stream)?)? else { return Ok(()) };
    let args = RandomArgs {
        out,
        seed,
        n: p.n as u64,
        stream: philox_stream,
        offset: p.recipe.offset,
        scale: p.recipe.scale,
        lo: p.recipe.min,
        hi: p.recipe.max,
    };
    let f = function(stream.context(), &RANDOM, &name)?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&args);
    // SAFETY: the argument struct matches the kernel's; `out` holds n elements of the dtype and
    // `seed` 8 bytes, both device memory on this stream's device (the caller's contract).
    unsafe { launch.launch(config) }.map_err(Error::driver("cuLaunchKernel(random)"))?;
    Ok(())
}

/// Every kernel [`launch`] can name: (family, name, bytes of its argument struct), for the
/// compile checks in tests/.
#[doc(hidden)]
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = Vec::new();
    for kind in ["uniform", "normal"] {
        for suffix in SUFFIXES {
            all.push((RANDOM, format!("random_{kind}_{suffix}"), size_of::<RandomArgs>()));
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use max_graph::attrs::{Attr, Attrs};
    use max_graph::ops::OpKind;
    use max_graph::ops::random::RandomParams;

    fn problem(kind: OpKind, dtype: DType, n: usize) -> Problem {
        let attrs = Attrs::new().with("dtype", Attr::DType(dtype));
        let recipe = RandomParams::from_op(kind, &attrs).and_then(|p| p.recipe()).unwrap();
        Problem { recipe, dtype, n }
    }

    #[test]
    fn the_kernel_follows_the_distribution_and_dtype() {
        for (kind, word) in [(OpKind::RandomUniform, "uniform"), (OpKind::RandomNormal, "normal")] {
            let dtypes = [
                (DType::Float32, "f32"),
                (DType::Float16, "f16"),
                (DType::BFloat16, "bf16"),
                (DType::Float64, "f64"),
                (DType::Float8E4m3fn, "f8e4m3fn"),
                (DType::Float8E5m2, "f8e5m2"),
            ];
            for (dtype, suffix) in dtypes {
                let (name, _) = select(&problem(kind, dtype, 10), 132).unwrap().unwrap();
                assert_eq!(name, format!("random_{word}_{suffix}"));
                assert!(kernels().iter().any(|k| k.1 == name));
            }
        }
        assert_eq!(kernels().len(), 12);
    }

    #[test]
    fn the_grid_covers_every_block_up_to_a_few_waves() {
        let grid =
            |dtype, n, sms| select(&problem(OpKind::RandomUniform, dtype, n), sms).unwrap().unwrap().1.grid_dim.0;
        assert_eq!(grid(DType::Float32, 1, 132), 1);
        // 4 elements a thread: 1024 elements per 256-thread block.
        assert_eq!(grid(DType::Float32, 1024, 132), 1);
        assert_eq!(grid(DType::Float32, 1025, 132), 2);
        // 2 elements a thread for float64.
        assert_eq!(grid(DType::Float64, 1025, 132), 3);
        assert_eq!(grid(DType::Float32, 1 << 30, 132), 132 * 8);
        assert_eq!(grid(DType::Float32, 1 << 30, 0), 8);
        let cfg = select(&problem(OpKind::RandomNormal, DType::BFloat16, 5), 132).unwrap().unwrap().1;
        assert_eq!((cfg.block_dim, cfg.shared_mem_bytes), ((256, 1, 1), 0));
        assert!(select(&problem(OpKind::RandomNormal, DType::Float32, 0), 132).unwrap().is_none());
    }

    #[test]
    fn other_dtypes_and_mismatched_recipes_are_errors() {
        let mut p = problem(OpKind::RandomUniform, DType::Float32, 4);
        p.dtype = DType::Int32;
        assert!(select(&p, 132).unwrap_err().to_string().contains("int32"));
        p.dtype = DType::Float64;
        assert!(select(&p, 132).is_err());
    }
}
