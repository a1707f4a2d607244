//! The engine's CUDA kernels: C++ sources embedded in the binary, compiled by NVRTC at first use
//! for the device's own architecture (`sm_90a` on Hopper), cached on disk, and launched through
//! typed wrappers. Nothing here needs the CUDA toolkit at build time: libnvrtc and libcuda are
//! loaded at run time (see `library`), and a missing library is an error, never a panic.

mod cache;
mod compile;
mod error;
pub mod fused;
pub mod launch;
mod library;
mod modules;
pub mod sources;

pub use cache::{CacheStats, cache_dir, cache_stats, prefetch, settle, warm_cache};
pub use compile::{Target, compile};
pub use error::Error;
pub use library::{add_search_dir, ensure_nvrtc, nvrtc_version};
pub use modules::{allow_smem, arch_name, function};

pub type Result<T> = std::result::Result<T, Error>;
