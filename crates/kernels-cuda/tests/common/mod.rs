//! Shared pieces of the GPU kernel tests: a CUDA context (or a skip that says why; with
//! MAX_REQUIRE_GPU=1 a skip is a failure) and exact host values of the 16-bit types.

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use cudarc::driver::CudaContext;

pub fn skip<T>(why: &str) -> Option<T> {
    if std::env::var("MAX_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("MAX_REQUIRE_GPU=1 but {why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// libnvrtc from the repository's virtual environment (the nvidia wheels), when the system
/// has none on the loader's path.
pub fn add_venv_nvrtc() {
    let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/lib");
    for py in std::fs::read_dir(lib).into_iter().flatten().flatten() {
        for sub in ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"] {
            let dir = py.path().join("site-packages").join(sub);
            if dir.is_dir() {
                max_kernels_cuda::add_search_dir(dir);
            }
        }
    }
}

pub fn context() -> Option<Arc<CudaContext>> {
    static CTX: OnceLock<Option<Arc<CudaContext>>> = OnceLock::new();
    CTX.get_or_init(|| {
        // SAFETY: only opens and closes the driver library.
        let present = std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() });
        if !present.unwrap_or(false) {
            return skip("no CUDA driver");
        }
        if cudarc::driver::result::init().is_err() {
            return skip("the CUDA driver failed to initialise");
        }
        match cudarc::driver::result::device::get_count() {
            Ok(n) if n > 0 => {}
            _ => return skip("no GPU"),
        }
        add_venv_nvrtc();
        if let Err(e) = max_kernels_cuda::ensure_nvrtc() {
            return skip(&format!("{e}"));
        }
        match CudaContext::new(0) {
            Ok(c) => Some(c),
            Err(e) => skip(&format!("cuCtx: {e}")),
        }
    })
    .clone()
}

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

pub fn f16_value(h: u16) -> f64 {
    let s = if h >> 15 != 0 { -1.0 } else { 1.0 };
    let (e, m) = ((h >> 10) & 0x1F, (h & 0x3FF) as f64);
    match e {
        0 => s * m * 2f64.powi(-24),
        31 if m == 0.0 => s * f64::INFINITY,
        31 => f64::NAN,
        _ => s * (1.0 + m / 1024.0) * 2f64.powi(e as i32 - 15),
    }
}

/// The epilogue activations in f64 (erf from libm: exact over the whole range, where a series
/// would lose every digit for |x| beyond a few units).
pub fn act(a: max_kernels_cuda::launch::epilogue::Act, x: f64) -> f64 {
    use max_kernels_cuda::launch::epilogue::Act;
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    match a {
        Act::None => x,
        Act::Relu => x.max(0.0),
        Act::Gelu => 0.5 * x * (1.0 + libm::erf(x / 2f64.sqrt())),
        Act::GeluTanh => 0.5 * x * (1.0 + (0.7978845608028654 * (x + 0.044715 * x * x * x)).tanh()),
        Act::Silu => x * sigmoid(x),
        Act::Sigmoid => sigmoid(x),
        Act::GeluQuick => x * sigmoid(1.702 * x),
    }
}

/// `compile(family, arch, Target::Ptx)`, kept under target/tmp/ptx-cache by a SHA-256 of the
/// family's full source, compile.rs (NVRTC's options), NVRTC's version and the arch:
/// launched_kernels, pdl_decl and ptxas read the PTX of the same families, and a fresh clone
/// (CI) compiles each family once instead of once per test binary. A failed write only costs
/// a compile next time; a failed compile is not kept.
pub fn ptx(family: &max_kernels_cuda::sources::Family, arch: &str) -> max_kernels_cuda::Result<Vec<u8>> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let nvrtc = format!("{:?}", max_kernels_cuda::nvrtc_version().ok());
    for part in [nvrtc.as_str(), arch, include_str!("../../src/compile.rs"), &family.full_source()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let key: String = h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptx-cache");
    let path = dir.join(format!("{}-{key}.ptx", family.name));
    if let Ok(bytes) = std::fs::read(&path) {
        return Ok(bytes);
    }
    let bytes = max_kernels_cuda::compile(family, arch, max_kernels_cuda::Target::Ptx)?;
    let tmp = path.with_extension(format!("tmp{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&tmp, &bytes))
        .and_then(|()| std::fs::rename(&tmp, &path));
    Ok(bytes)
}
