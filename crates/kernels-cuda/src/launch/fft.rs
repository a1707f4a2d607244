//! Launching fft.cu: irfft, one block per row (see the kernel file for the algorithm). The
//! choice of entry, block, grid, shared memory and scratch is data: [`select`] maps the call's
//! geometry, dtype and the device's shared-memory limit to an [`IrfftConfig`], touching no GPU,
//! and [`irfft`] launches what it names.
//!
//! A row's work area (two complex buffers of the transform's length W: N, or the Bluestein
//! length L) lives in shared memory when it fits, else in a global scratch slice per block;
//! the scratch also holds the Bluestein kernel spectrum and its ping-pong buffer (2L values)
//! at its start. The caller allocates `scratch_bytes` on the stream.

use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;
use max_graph::ops::fft::IrfftShape;

use crate::sources::FFT;
use crate::{Error, Result, allow_smem, function};

/// Threads of a block at most (FFT_THREADS in fft.cu).
pub const MAX_THREADS: u32 = 512;
/// Blocks stride over the rows past this many.
const MAX_BLOCKS: usize = 1 << 16;
/// Global work areas are sized to this many bytes at most (one block's area at least).
const GLOBAL_WORK_BUDGET: usize = 256 << 20;
/// The kernel indexes a transform with 32-bit integers: N and L stay below 2^31.
pub const MAX_LEN: usize = 1 << 30;

#[repr(C)]
#[derive(Clone, Copy)]
struct IrfftArgs {
    x: u64,
    out: u64,
    scratch: u64,
    kernel: u64,
    outer: i64,
    m: i64,
    inner: i64,
    n: i64,
    used: i64,
    len: i64,
    l: i64,
    scale: f64,
    complex: i32,
    pad: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `IrfftArgs`.
unsafe impl DeviceRepr for IrfftArgs {}

/// What [`select`] needs of the device: the dynamic shared memory a block may opt into.
#[derive(Clone, Copy, Debug)]
pub struct DeviceFacts {
    pub smem_max: usize,
}

/// The stream's device's facts.
pub fn device_facts(stream: &Arc<CudaStream>) -> Result<DeviceFacts> {
    let optin = stream
        .context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(Error::driver("cuDeviceGetAttribute"))?;
    Ok(DeviceFacts { smem_max: optin.max(0) as usize })
}

/// How one irfft runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IrfftConfig {
    /// `irfft_smem_f32`, `irfft_global_bf16`, ...
    pub kernel: String,
    /// The Bluestein kernel's entry (`irfft_chirp_f32`), launched first; None for smooth N.
    pub chirp: Option<&'static str>,
    /// N, the complex transform's length (n / 2 for even n, else n).
    pub len: usize,
    /// L, the Bluestein convolution's length, 0 for smooth N.
    pub l: usize,
    pub threads: u32,
    pub grid: u32,
    /// Dynamic shared memory per block (0 on the global path).
    pub smem: u32,
    /// Global scratch the launch needs: the Bluestein kernel (2L values), then the work areas.
    pub scratch_bytes: usize,
    /// Where the work areas start in the scratch.
    pub work_offset: usize,
}

/// Whether Stockham passes of radix 4, 2, 3, 5 and 7 take a length (as fft.cu chooses them).
pub fn smooth(mut n: usize) -> bool {
    while n > 1 {
        match [4, 2, 3, 5, 7].into_iter().find(|r| n.is_multiple_of(*r)) {
            Some(r) => n /= r,
            None => return false,
        }
    }
    true
}

fn short(dtype: DType) -> Result<(&'static str, usize)> {
    Ok(match dtype {
        DType::Float32 => ("f32", 8),
        DType::Float16 => ("f16", 8),
        DType::BFloat16 => ("bf16", 8),
        DType::Float64 => ("f64", 16),
        other => return Err(Error::Unsupported(format!("irfft of {other} is not supported on the GPU"))),
    })
}

/// The configuration for an irfft of geometry `g` on `dtype` values.
pub fn select(g: &IrfftShape, dtype: DType, dev: &DeviceFacts) -> Result<IrfftConfig> {
    let (dt, csize) = short(dtype)?;
    let len = if g.n.is_multiple_of(2) { g.n / 2 } else { g.n };
    let l = if smooth(len) { 0 } else { (2 * len - 1).next_power_of_two() };
    let w = if l > 0 { l } else { len };
    if w > MAX_LEN {
        return Err(Error::Unsupported(format!(
            "irfft: n = {} needs a transform of {w} points on the GPU, more than its limit of {MAX_LEN}",
            g.n
        )));
    }
    let rows = g.rows();
    let threads = w.div_ceil(4).next_power_of_two().clamp(32, MAX_THREADS as usize) as u32;
    let per_row = 2 * w * csize;
    let kernel_bytes = 2 * l * csize;
    let chirp = (l > 0).then_some(if csize == 16 { "irfft_chirp_f64" } else { "irfft_chirp_f32" });
    let cap = rows.clamp(1, MAX_BLOCKS);
    let (path, grid, smem, work) = if per_row <= dev.smem_max {
        ("smem", cap, per_row, 0)
    } else {
        let blocks = (GLOBAL_WORK_BUDGET / per_row).clamp(1, cap);
        ("global", blocks, 0, blocks * per_row)
    };
    Ok(IrfftConfig {
        kernel: format!("irfft_{path}_{dt}"),
        chirp,
        len,
        l,
        threads,
        grid: grid as u32,
        smem: smem as u32,
        scratch_bytes: kernel_bytes + work,
        work_offset: kernel_bytes,
    })
}

/// irfft of `x` into `out` (contiguous device tensors of `dtype` with geometry `g`), as `cfg`
/// says, with `scratch` holding `cfg.scratch_bytes` (0 when none is needed).
pub fn irfft(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, out, scratch): (u64, u64, u64),
    g: &IrfftShape,
    cfg: &IrfftConfig,
) -> Result<()> {
    if g.output_len() == 0 {
        return Ok(());
    }
    let args = IrfftArgs {
        x,
        out,
        scratch: scratch + cfg.work_offset as u64,
        kernel: scratch,
        outer: g.outer as i64,
        m: g.m as i64,
        inner: g.inner as i64,
        n: g.n as i64,
        used: g.used() as i64,
        len: cfg.len as i64,
        l: cfg.l as i64,
        scale: g.scale(),
        complex: g.complex as i32,
        pad: 0,
    };
    short(dtype)?;
    if let Some(name) = cfg.chirp {
        go(
            stream,
            name,
            &args,
            LaunchConfig { grid_dim: (1, 1, 1), block_dim: (MAX_THREADS, 1, 1), shared_mem_bytes: 0 },
        )?;
    }
    let config =
        LaunchConfig { grid_dim: (cfg.grid, 1, 1), block_dim: (cfg.threads, 1, 1), shared_mem_bytes: cfg.smem };
    go(stream, &cfg.kernel, &args, config)
}

fn go(stream: &Arc<CudaStream>, name: &str, args: &IrfftArgs, config: LaunchConfig) -> Result<()> {
    let f = function(stream.context(), &FFT, name)?;
    allow_smem(stream.context(), &f, config.shared_mem_bytes)?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(args);
    // SAFETY: every fft.cu entry takes one IrfftArgs (same #[repr(C)] layout); its pointers
    // address device buffers holding what the geometry describes, and the scratch holds the
    // bytes `select` asked for.
    unsafe { launch.launch(config) }.map_err(Error::driver("cuLaunchKernel(irfft)"))?;
    Ok(())
}

/// Every kernel these wrappers launch: (family, name, bytes of its argument struct), for the
/// compile checks in tests/.
#[doc(hidden)]
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let size = size_of::<IrfftArgs>();
    let mut all = Vec::new();
    for dt in ["f32", "f16", "bf16", "f64"] {
        for path in ["smem", "global"] {
            all.push((FFT, format!("irfft_{path}_{dt}"), size));
        }
    }
    for name in ["irfft_chirp_f32", "irfft_chirp_f64"] {
        all.push((FFT, name.to_string(), size));
    }
    all
}

#[cfg(test)]
mod tests {
    use max_graph::ops::fft::Normalization;

    use super::*;

    const H200: DeviceFacts = DeviceFacts { smem_max: 232_448 };

    fn shape(rows: usize, n: usize) -> IrfftShape {
        IrfftShape { outer: rows, m: n / 2 + 1, inner: 1, n, complex: false, normalization: Normalization::Backward }
    }

    #[test]
    fn smooth_lengths_run_in_shared_memory() {
        let c = select(&shape(8, 64), DType::Float32, &H200).unwrap();
        let want = IrfftConfig {
            kernel: "irfft_smem_f32".into(),
            chirp: None,
            len: 32,
            l: 0,
            threads: 32,
            grid: 8,
            smem: 2 * 32 * 8,
            scratch_bytes: 0,
            work_offset: 0,
        };
        assert_eq!(c, want);
        // Odd n transforms all n points; bf16 computes in f32.
        let c = select(&shape(3, 4725), DType::BFloat16, &H200).unwrap();
        assert_eq!((c.kernel.as_str(), c.len, c.l, c.threads, c.smem), ("irfft_smem_bf16", 4725, 0, 512, 2 * 4725 * 8));
        // The largest f32 rows that fit: 2 * 14336 * 8 bytes.
        let c = select(&shape(1, 2 * 14336), DType::Float32, &H200).unwrap();
        assert_eq!((c.kernel.as_str(), c.smem), ("irfft_smem_f32", 229_376));
    }

    #[test]
    fn other_lengths_take_bluestein() {
        // n = 1009 (prime, odd): N = 1009, L = 2048; the kernel spectrum leads the scratch.
        let c = select(&shape(5, 1009), DType::Float64, &H200).unwrap();
        assert_eq!((c.kernel.as_str(), c.chirp, c.len, c.l), ("irfft_smem_f64", Some("irfft_chirp_f64"), 1009, 2048));
        assert_eq!(
            (c.smem, c.scratch_bytes, c.work_offset, c.threads),
            (2 * 2048 * 16, 2 * 2048 * 16, 2 * 2048 * 16, 512)
        );
        // n = 2 * 97: N = 97, L = 256.
        let c = select(&shape(1, 194), DType::Float16, &H200).unwrap();
        assert_eq!((c.chirp, c.len, c.l, c.threads), (Some("irfft_chirp_f32"), 97, 256, 64));
    }

    #[test]
    fn long_rows_use_global_work_areas() {
        // N = 2^19: 8 MiB per row, 32 blocks under the budget.
        let c = select(&shape(100, 1 << 20), DType::Float32, &H200).unwrap();
        assert_eq!((c.kernel.as_str(), c.smem, c.grid), ("irfft_global_f32", 0, 32));
        assert_eq!((c.scratch_bytes, c.work_offset), (32 * (8 << 20), 0));
        // Fewer rows than the budget allows: one block each.
        let c = select(&shape(3, 1 << 20), DType::Float32, &H200).unwrap();
        assert_eq!((c.grid, c.scratch_bytes), (3, 3 * (8 << 20)));
        // A huge Bluestein row: one block, still.
        let c = select(&shape(2, 2 * 1_000_003), DType::Float64, &H200).unwrap();
        let l = 1 << 21;
        assert_eq!((c.kernel.as_str(), c.l, c.grid), ("irfft_global_f64", l, 2));
        assert_eq!((c.scratch_bytes, c.work_offset), (2 * l * 16 + 2 * (2 * l * 16), 2 * l * 16));
        // Many short rows: the grid strides past 2^16 blocks.
        let c = select(&shape(1 << 20, 16), DType::Float32, &H200).unwrap();
        assert_eq!(c.grid, 1 << 16);
    }

    #[test]
    fn limits_are_errors() {
        let e = select(&shape(1, 3 << 31), DType::Float32, &H200).unwrap_err().to_string();
        assert!(e.contains("more than its limit"), "{e}");
        let e = select(&shape(1, 8), DType::Int32, &H200).unwrap_err().to_string();
        assert!(e.contains("irfft of int32 is not supported"), "{e}");
    }

    #[test]
    fn smooth_matches_the_kernel_rule() {
        assert!(smooth(1) && smooth(4725) && smooth(1 << 20) && smooth(2 * 343));
        assert!(!smooth(97) && !smooth(1009) && !smooth(22));
    }
}
